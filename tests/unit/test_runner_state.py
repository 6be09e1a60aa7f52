"""Progress is read from storage keys: committed attempts and the next attempt number."""

from gdpval.storage.progress import progress_from_keys


def test_committed_and_next_attempt():
    keys = [
        "runs/r/run.json",
        "runs/r/samples/a-r0/attempt-1/result.json",
        "runs/r/samples/a-r0/attempt-1/transcript.jsonl",
        "runs/r/samples/b-r0/attempt-1/transcript.jsonl",
        "runs/r/samples/b-r0/attempt-2/deliverable_files/x/result.json",
    ]
    progress = progress_from_keys(keys)
    assert progress["a-r0"].last_committed == 1 and progress["a-r0"].next_attempt == 2
    assert progress["b-r0"].last_committed is None
    assert progress["b-r0"].next_attempt == 3  # a half-written attempt is never reused


def test_no_keys_means_first_attempt():
    assert progress_from_keys([]) == {}

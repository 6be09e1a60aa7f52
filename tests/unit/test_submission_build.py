"""build_submission over hand-made committed results, on a local folder and on MinIO."""

from __future__ import annotations

import json

import pytest

from gdpval.records import RunNotPrepared
from gdpval.storage.committed import committed_attempts
from gdpval.storage.local import LocalStorage
from gdpval.submission.build import build_submission
from support import runs
from support.submission import RUN, SUB, by_task, check_single_package, make_run, table


def test_build_on_a_local_folder(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage)
    check_single_package(storage)


def test_rebuild_is_idempotent_and_follows_new_commits(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage)
    build_submission(storage, RUN)
    first = {key: storage.get_bytes(key) for key in storage.list(SUB) if not key.endswith(".json")}
    build_submission(storage, RUN)
    assert {key: storage.get_bytes(key) for key in storage.list(SUB) if not key.endswith(".json")} == first
    half = runs.entries([runs.task("t-half")])[0]
    runs.commit(storage, RUN, half, 2, runs.succeeded(half, 2, {"half.txt": b""}), {"half.txt": b"now committed"})
    info = build_submission(storage, RUN)
    assert info.counts.succeeded == 3 and info.counts.missing == 0
    assert storage.get_bytes(f"{SUB}/deliverable_files/t-half/half.txt") == b"now committed"


def test_stale_files_of_an_earlier_build_are_removed(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage)
    storage.put_bytes(f"{SUB}/deliverable_files/t-half/old.txt", b"from an earlier build")
    info = build_submission(storage, RUN)
    assert not storage.exists(f"{SUB}/deliverable_files/t-half/old.txt") and not info.warnings


def test_repeats_give_one_full_package_per_repeat(tmp_path):
    storage = LocalStorage(tmp_path)
    items = runs.entries([runs.task("t1"), runs.task("t2")], repeats=2)
    runs.write_run(storage, RUN, items, repeats=2)
    for entry in items:
        if entry.sample.sample_id != "t2-r1":
            files = {f"out-{entry.sample.repeat}.txt": entry.sample.sample_id.encode()}
            runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, files), files)
    info = build_submission(storage, RUN)
    assert not storage.exists(f"{SUB}/data/train-00000-of-00001.parquet")
    for k in (0, 1):
        root = f"{SUB}/repeat-{k}"
        rows = by_task(table(storage, f"{root}/data/train-00000-of-00001.parquet"))
        assert rows["t1"]["deliverable_files"] == [f"deliverable_files/t1/out-{k}.txt"]
        assert storage.get_bytes(f"{root}/deliverable_files/t1/out-{k}.txt") == f"t1-r{k}".encode()
        meta = json.loads(storage.get_text(f"{root}/submission_info.json"))
        assert (meta["repeat"], meta["repeats"], meta["tasks"]) == (k, 2, 2)
    assert by_task(table(storage, f"{SUB}/repeat-1/data/train-00000-of-00001.parquet"))["t2"]["deliverable_files"] == []
    assert (info.counts.total, info.counts.succeeded, info.counts.missing, info.counts.ready) == (4, 3, 1, 3)
    assert [p.submission_ready for p in info.packages] == [1.0, 0.5]
    assert len(table(storage, f"runs/{RUN}/results.parquet")) == 4


def test_listed_but_absent_deliverable_is_left_out_and_reported(tmp_path):
    storage = LocalStorage(tmp_path)
    entry = runs.entries([runs.task("t1")])[0]
    runs.write_run(storage, RUN, [entry])
    runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, {"a.txt": b"", "gone.txt": b""}), {"a.txt": b"a"})
    info = build_submission(storage, RUN)
    row = table(storage, f"{SUB}/data/train-00000-of-00001.parquet")[0]
    assert row["deliverable_files"] == ["deliverable_files/t1/a.txt"]
    assert any("gone.txt" in w for w in info.warnings)


def test_unprepared_run_is_a_clear_error(tmp_path):
    with pytest.raises(RunNotPrepared, match="never prepared.*check --output"):
        build_submission(LocalStorage(tmp_path), "nope")


def test_committed_attempt_is_the_highest_with_a_result():
    keys = [
        "runs/r/samples/s1/attempt-1/result.json",
        "runs/r/samples/s1/attempt-2/deliverable_files/x.txt",
        "runs/r/samples/s1/attempt-10/result.json",
        "runs/r/samples/s1/attempt-10/deliverable_files/y/z.txt",
        "runs/r/samples/s2/attempt-1/transcript.jsonl",
    ]
    chosen = committed_attempts(keys, "r")
    assert set(chosen) == {"s1"}
    assert (chosen["s1"].attempt, chosen["s1"].present) == (10, {"y/z.txt"})

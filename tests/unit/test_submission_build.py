"""build_submission over hand-made committed results, on a local folder and on MinIO."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest

from gdpval.storage import Storage
from gdpval.storage.local import LocalStorage
from gdpval.storage.s3 import S3Storage
from gdpval.submission.build import SubmissionError, build_submission, committed_attempts
from gdpval.submission.schema import SUBMISSION_COLUMNS
from support import runs

RUN = "r1"
SUB = f"runs/{RUN}/submission"


def table(storage: Storage, key: str) -> list[dict]:
    return pq.read_table(io.BytesIO(storage.get_bytes(key))).to_pylist()


def by_task(rows: list[dict]) -> dict[str, dict]:
    return {row["task_id"]: row for row in rows}


def make_run(storage: Storage) -> None:
    """t-ok succeeds; t-fail fails; t-retry has a result only on attempt 2; t-half only a half-written attempt."""
    items = runs.entries([runs.task(t) for t in ("t-ok", "t-fail", "t-retry", "t-half")])
    ok, bad, retry, half = items
    runs.write_run(storage, RUN, items)
    runs.commit(
        storage, RUN, ok, 1, runs.succeeded(ok, 1, {"report.md": b"# ok", "data/a b (1).csv": b"1,2"}), {"report.md": b"# ok", "data/a b (1).csv": b"1,2"}
    )
    runs.commit(storage, RUN, bad, 1, runs.failed(bad, 1), {"draft.txt": b"partial"})
    runs.commit(storage, RUN, retry, 1, None, {"old.txt": b"stale attempt"})
    runs.commit(storage, RUN, retry, 2, runs.succeeded(retry, 2, {"new.txt": b"v2"}, text="second"), {"new.txt": b"v2"})
    runs.commit(storage, RUN, half, 1, None, {"half.txt": b"never committed"})


def check_single_package(storage: Storage) -> None:
    info = build_submission(storage, RUN)
    rows = table(storage, f"{SUB}/data/train-00000-of-00001.parquet")
    assert [r["task_id"] for r in rows] == ["t-ok", "t-fail", "t-retry", "t-half"]
    assert list(rows[0]) == list(SUBMISSION_COLUMNS)
    got = by_task(rows)
    assert got["t-ok"]["deliverable_files"] == [
        "deliverable_files/t-ok/data/a b (1).csv",
        "deliverable_files/t-ok/report.md",
    ]
    assert got["t-retry"]["deliverable_files"] == ["deliverable_files/t-retry/new.txt"]
    assert got["t-retry"]["deliverable_text"] == "second"
    # t-fail hit max_steps after writing a file: submission-ready (the benchmark's definition), not completed.
    assert got["t-fail"]["deliverable_files"] == ["deliverable_files/t-fail/draft.txt"]
    assert got["t-fail"]["deliverable_text"] == "partial answer"
    assert got["t-half"]["deliverable_files"] == [] and got["t-half"]["deliverable_text"] == ""
    for row in rows:
        for rel in row["deliverable_files"]:
            assert storage.exists(f"{SUB}/{rel}")
    assert storage.get_bytes(f"{SUB}/deliverable_files/t-ok/data/a b (1).csv") == b"1,2"
    assert sorted(storage.list(SUB)) == sorted(
        [
            f"{SUB}/data/train-00000-of-00001.parquet",
            f"{SUB}/submission_info.json",
            f"{SUB}/deliverable_files/t-ok/report.md",
            f"{SUB}/deliverable_files/t-ok/data/a b (1).csv",
            f"{SUB}/deliverable_files/t-retry/new.txt",
            f"{SUB}/deliverable_files/t-fail/draft.txt",
        ]
    )
    meta = json.loads(storage.get_text(f"{SUB}/submission_info.json"))
    assert meta["tasks"] == 4
    assert {k: v for k, v in meta["counts"].items() if v} == {"total": 4, "succeeded": 2, "failed": 1, "missing": 1, "ready": 3}
    assert meta["submission_ready"] == 0.75 and meta["completed"] == 0.5
    assert "submission_ready" in meta["submission_ready_definition"] and "completed" in meta["submission_ready_definition"]
    assert "OpenAI's grader" in meta["official_score"]
    assert (meta["dataset"], meta["dataset_revision"], meta["run_name"]) == ("openai-mirror/gdpval", "a" * 40, RUN)
    assert info.counts == info.packages[0].counts and info.uri == storage.url(SUB)
    results = by_task(table(storage, f"runs/{RUN}/results.parquet"))
    assert {t: (r["status"], r["attempt"]) for t, r in results.items()} == {
        "t-ok": ("succeeded", 1),
        "t-fail": ("failed", 1),
        "t-retry": ("succeeded", 2),
        "t-half": ("missing", None),
    }
    assert results["t-fail"]["error_kind"] == "max_steps"
    assert {t: (r["submission_ready"], r["completed"]) for t, r in results.items()} == {
        "t-ok": (True, True),
        "t-fail": (True, False),
        "t-retry": (True, True),
        "t-half": (False, False),
    }


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
    with pytest.raises(SubmissionError, match="never prepared.*check --output"):
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


@pytest.mark.s3
def test_build_on_s3_writes_the_same_objects(s3, s3_env, tmp_path):
    storage = S3Storage(s3.make_bucket(), "gdpval")
    make_run(storage)
    check_single_package(storage)
    local = LocalStorage(tmp_path)
    make_run(local)
    build_submission(local, RUN)
    assert sorted(storage.list(SUB)) == sorted(local.list(SUB))
    for key in local.list(SUB):
        if not key.endswith(".json"):
            assert storage.get_bytes(key) == local.get_bytes(key), key

"""A hand-made run with every kind of attempt, and the checks of the submission built from it:
shared by the submission tests on a local folder (tests/unit) and on MinIO (tests/integration)."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq

from gdpval.storage import Storage
from gdpval.submission.build import build_submission
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

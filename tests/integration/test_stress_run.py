"""`gdpval run` over the stress dataset: the real dataset's shape, scale and text, end to end.

One full 220-task run of the current revision (13 columns) with the scripted model, checked
row by row: every task once, every reference file seen whole, prompts (U+2028 and all) and
rubrics byte-identical in the submission, the gold answers nowhere. The first revision (7
columns) runs on its first 20 tasks. Measured here: the 220-task run takes about 40 s.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gdpval.fakemodel.script import parse_inventory
from gdpval.manifest import load_manifest
from support import stress
from support.cli import SUBMISSION_COLUMNS, gdpval, run_args

pytestmark = pytest.mark.slow


def run(dataset: Path, model, output: Path, *extra: str) -> None:
    done = gdpval(*run_args(dataset, model.base_url, output, *extra, run_name="stress"), env={"TMPDIR": str(output.parent)}, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


def assert_complete_package(dataset: Path, output: Path, tasks: int) -> list[dict]:
    """Every task once, in dataset order, with its own text intact and every reference seen whole."""
    expected = pq.read_table(dataset / stress.PARQUET).to_pylist()[:tasks]
    root = output / "runs/stress/submission"
    table = pq.read_table(root / "data/train-00000-of-00001.parquet")
    assert table.column_names == SUBMISSION_COLUMNS
    rows = table.to_pylist()
    assert [r["task_id"] for r in rows] == [e["task_id"] for e in expected]
    for row, source in zip(rows, expected, strict=True):
        for column in stress.FIRST_COLUMNS:
            assert row[column] == source[column], (row["task_id"], column)
        assert (row["rubric_pretty"], row["rubric_json"]) == (source.get("rubric_pretty", ""), source.get("rubric_json", ""))
        assert stress.GOLD_MARK not in row["deliverable_text"]
        [inventory] = row["deliverable_files"]
        seen = parse_inventory((root / inventory).read_text(encoding="utf-8"))
        seen_refs = {path.split("/reference_files/", 1)[1]: size for path, size in seen.items()}
        assert seen_refs == {ref.split("/", 1)[1]: (dataset / ref).stat().st_size for ref in source["reference_files"]}
    results = pq.read_table(output / "runs/stress/results.parquet").to_pylist()
    assert len(results) == tasks and {r["status"] for r in results} == {"succeeded"}
    return rows


def test_full_run_of_the_current_revision(scripted_model, tmp_path):
    dataset = stress.make_stress_dataset(tmp_path / "dataset", "current")
    run(dataset, scripted_model, tmp_path / "out")
    rows = assert_complete_package(dataset, tmp_path / "out", stress.TASKS)
    assert sum(len(r["reference_files"]) for r in rows) == stress.REFERENCE_FILES
    assert sum(stress.LINE_SEPARATOR in r["prompt"] for r in rows) >= 40  # compared whole above
    manifest = load_manifest((tmp_path / "out/runs/stress/manifest.jsonl").read_text(encoding="utf-8"))
    assert [e.task.prompt for e in manifest] == [r["prompt"] for r in rows]


def test_first_revision_runs_too(scripted_model, tmp_path):
    dataset = stress.make_stress_dataset(tmp_path / "dataset", "first")
    run(dataset, scripted_model, tmp_path / "out", "--limit", "20")
    rows = assert_complete_package(dataset, tmp_path / "out", 20)
    assert {(r["rubric_pretty"], r["rubric_json"]) for r in rows} == {("", "")}

"""Run folders across versions and resumes, through the real CLI: a folder written by 0.1.0 resumes
and rebuilds its submission; a resume keeps the run's settings and refuses changed pinned ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq

from support.cli import gdpval, run_args

LEGACY = Path(__file__).resolve().parents[1] / "data/legacy-run-0.1.0"


def legacy_copy(tmp_path: Path, dataset: Path) -> Path:
    """The 0.1.0 folder, its dataset location pointed at this test's stand-in copy (same content)."""
    shutil.copytree(LEGACY / "runs", tmp_path / "runs")
    run_json = tmp_path / "runs/demo/run.json"
    record = json.loads(run_json.read_text())
    record["dataset"]["location"] = str(dataset)
    run_json.write_text(json.dumps(record))
    return tmp_path


def test_a_run_folder_of_0_1_0_resumes_and_rebuilds_its_submission(standin_dataset, scripted_model, tmp_path):
    out = legacy_copy(tmp_path, standin_dataset)
    done = gdpval("run", "--output", str(out), "--run-name", "demo", "--base-url", scripted_model.base_url)
    assert done.returncode == 0, done.stderr
    assert "2 samples, 1 already committed, 1 to run" in done.stdout
    rows = pq.read_table(out / "runs/demo/submission/data/train-00000-of-00001.parquet").to_pylist()
    assert len(rows) == 2 and all(row["deliverable_files"] for row in rows)
    kept = json.loads((LEGACY / "runs/demo/run.json").read_text())
    assert json.loads((out / "runs/demo/run.json").read_text())["created_at"] == kept["created_at"], "run.json is not rewritten"


def test_a_resume_refuses_a_changed_pinned_setting_in_one_line(standin_dataset, scripted_model, tmp_path):
    args = run_args(standin_dataset, scripted_model.base_url, tmp_path, "--limit", "1", "--max-steps", "30", run_name="r")
    assert gdpval(*args).returncode == 0
    refused = gdpval(*args[:-1], "31")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--max-steps 31 (the run has 30)" in refused.stderr
    resumed = gdpval("run", "--output", str(tmp_path), "--run-name", "r", "--base-url", scripted_model.base_url)
    assert resumed.returncode == 0 and "1 already committed, 0 to run" in resumed.stdout


def test_no_model_and_no_run_name_is_one_line(tmp_path):
    done = gdpval("run", "--output", str(tmp_path))
    assert done.returncode == 2 and done.stderr.strip() == "error: --model is required (with --run-name alone, an existing run resumes)"


def test_an_unreadable_run_json_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "runs/x").mkdir(parents=True)
    (tmp_path / "runs/x/run.json").write_text('{"format": 2, "run_name": "x"}')
    done = gdpval("run", "--output", str(tmp_path), "--run-name", "x")
    assert done.returncode == 2 and "is not a run record this version reads" in done.stderr and "choose a new --run-name" in done.stderr


def test_missing_references_can_be_skipped_with_a_warning(standin_dataset, scripted_model, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(standin_dataset, broken)
    victim = next(p for p in sorted((broken / "reference_files").rglob("*")) if p.is_file())
    victim.unlink()
    out = tmp_path / "out"
    done = gdpval(*run_args(broken, scripted_model.base_url, out, "--missing-references", "skip", run_name="r"))
    assert done.returncode == 0, done.stderr
    results = pq.read_table(out / "runs/r/results.parquet").to_pylist()
    warned = [r for r in results if r["warnings"]]
    assert {r["status"] for r in results} == {"succeeded"} and len(warned) == 1
    assert victim.name in warned[0]["warnings"][0] and "ran without" in warned[0]["warnings"][0]


def test_a_sample_cut_short_after_writing_a_file_is_ready_but_not_completed(standin_dataset, scripted_model, tmp_path):
    """The benchmark's submission_ready: the scripted model writes its file at step 3 and would answer at step 4."""
    done = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--limit", "2", "--max-steps", "3"))
    assert done.returncode == 1, done.stderr  # no sample has a committed success
    results = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert [(r["status"], r["error_kind"], r["submission_ready"], r["completed"]) for r in results] == [("failed", "max_steps", True, False)] * 2
    rows = pq.read_table(tmp_path / "runs/t/submission/data/train-00000-of-00001.parquet").to_pylist()
    assert all(row["deliverable_files"] and (tmp_path / "runs/t/submission" / row["deliverable_files"][0]).is_file() for row in rows)
    info = json.loads((tmp_path / "runs/t/submission/submission_info.json").read_text())
    assert (info["submission_ready"], info["completed"]) == (1.0, 0.0)
    assert "submission_ready 1.00, completed 0.00" in done.stdout

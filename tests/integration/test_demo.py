"""`make run`'s script, hack/demo.sh, as a newcomer runs it: the scripted model over the 12-task sample
rewritten as the current 13-column revision (stand-in gold and rubrics), a submission, then the scripted
judge's rubric and pairwise estimates and a report with its grading section, labelled as scripted."""

from __future__ import annotations

import json
import os
import subprocess

import pyarrow.parquet as pq

from infra.paths import REPO_ROOT


def test_the_demo_runs_judges_and_reports_the_whole_pipeline(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(["hack/demo.sh"], cwd=REPO_ROOT, env={**os.environ, "GDPVAL_OUT": str(out)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "submission_ready 1.00, completed 1.00" in said and "scripted judge: its verdicts come from a hash" in said
    summary = json.loads((out / "judge-summary.json").read_text())
    assert summary["scored"] == 12 and summary["pairwise"]["samples"] == 12
    assert summary["pairwise"]["wins"] + summary["pairwise"]["ties"] + summary["pairwise"]["losses"] == 12
    report = (out / "runs/demo/report.html").read_text()
    assert '<section id="grading">' in report and "judge scripted" in report
    columns = pq.read_schema(out / "demo-dataset/data/train-00000-of-00001.parquet").names
    assert len(columns) == 13 and "rubric_json" in columns and "deliverable_files" in columns

"""`gdpval run` with another harness's conventions, end to end: the real CLI, the scripted model over
HTTP, real sandboxes. With `--finish submit --system-prompt none` every sample must end by a submit
call whose answer is the submission's deliverable_text, in a conversation with no system message;
a template that cannot be filled is refused before any sample starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from support.cli import gdpval, run_args


def gdpval_run(dataset: Path, base_url: str, output: Path, *extra: str) -> subprocess.CompletedProcess:
    return gdpval(*run_args(dataset, base_url, output, *extra))


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_submit_finish_without_a_system_prompt(standin_dataset, scripted_model, tmp_path):
    done = gdpval_run(standin_dataset, scripted_model.base_url, tmp_path, "--finish", "submit", "--system-prompt", "none")
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(tmp_path / "runs/t/submission/data/train-00000-of-00001.parquet").to_pylist()
    assert len(rows) == 12
    run_json = json.loads((tmp_path / "runs/t/run.json").read_text())
    assert run_json["settings"]["prompt"] == {"system": "none", "template": "default", "finish": "submit"}
    for row in rows:
        transcript = events(tmp_path / f"runs/t/samples/{row['task_id']}-r0/attempt-1/transcript.jsonl")
        start, *_, submit, end = transcript
        assert start["event"] == "start" and start["system"] is None and start["tools"] == ["bash", "python_exec", "submit"]
        assert "call submit" in start["user"]
        assert (submit["event"], end["event"], end["status"]) == ("submit", "end", "succeeded"), row["task_id"]
        assert "reference_inventory.md" in submit["answer"] and row["deliverable_text"] == submit["answer"]
        assert not [e for e in transcript if e["event"] == "nudge"]
        assert row["deliverable_files"], row["task_id"]


def test_an_unfillable_template_is_refused_before_any_sample(standin_dataset, scripted_model, tmp_path):
    done = gdpval_run(standin_dataset, scripted_model.base_url, tmp_path, "--prompt-template", "{prompt}\n{reference_files}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid settings: --prompt-template: "), done.stderr
    assert "unknown placeholder {reference_files}" in lines[0]
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("result.json"))

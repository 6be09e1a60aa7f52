"""`gdpval run`'s plain progress lines and `gdpval status` through the real CLI, on a local folder and
on MinIO, after scripted-model runs over stress tasks (current revision) with failures in them."""

from __future__ import annotations

import re

from gdpval import contract
from gdpval.storage import layout, open_storage
from support import stress
from support.cli import gdpval, run_args

TASKS = 6


def test_run_lines_then_status_of_a_folder_and_an_s3_prefix(scripted_model, tmp_path, s3, s3_env):
    dataset = stress.make_stress_dataset(tmp_path / "dataset", "current")
    bucket = s3.make_bucket()
    failed_in: dict[str, int] = {}
    for output in (str(tmp_path / "out"), f"s3://{bucket}/gdpval"):
        done = gdpval(*run_args(dataset, scripted_model.base_url, output, "--limit", str(TASKS), "--max-steps", "3", run_name="st"), timeout=600)
        assert done.returncode == contract.EXIT_SAMPLES_FAILED, done.stderr[-3000:]  # some samples hit the step limit
        # The progress lines (the readiness check's own lines name samples too, after "check ").
        lines = [line for line in done.stdout.splitlines() if (line.endswith("-r0") or "-r0: " in line) and not line.startswith("check ")]
        assert len(lines) == TASKS
        counted = sorted(
            int(m[1]) for m in (re.search(r"\[done (\d+)/6  running \d+  failed \d+  tokens in [\d,]+ out [\d,]+  ETA ", line) for line in lines) if m
        )
        assert counted == list(range(1, TASKS + 1))  # every line carries the figures (not eaten as markup)
        failed = sum(": failed: max_steps" in line for line in lines)
        assert 0 < failed < TASKS
        failed_in[output] = failed
        assert f"report: {output.rstrip('/')}/{layout.report('st')}" in done.stdout  # written after the submission

        shown = gdpval("status", "--output", output, "--run-name", "st")
        assert shown.returncode == 0, shown.stderr[-3000:]
        out = shown.stdout.splitlines()
        assert out[0].startswith("st (") and layout.run_root("st") in out[0]
        assert out[1].startswith(f"done {TASKS}/{TASKS}  running 0  failed {failed}  tokens in ")
        assert f"  {stress.stress_rows()[0]['sector']}" in "\n".join(out)
        assert out.count("latest failures:") == 1 and sum("max_steps: no final answer within max_steps=3" in line for line in out) == min(failed, 5)
        watched = gdpval("status", "--output", output, "--run-name", "st", "--watch", "--interval", "0.2", timeout=30)
        assert watched.returncode == 0 and watched.stdout == shown.stdout  # a finished run prints once and returns
    # The comparison over S3, as a cluster run's folder is read: a full run against the cut one wins where that one failed.
    full = gdpval(*run_args(dataset, scripted_model.base_url, f"s3://{bucket}/gdpval", "--limit", str(TASKS), run_name="full"), timeout=600)
    assert full.returncode == 0, full.stderr[-3000:]
    made = gdpval("report", "--output", f"s3://{bucket}/gdpval", "--run-name", "full", "--compare", "st")
    assert made.returncode == 0 and made.stdout.strip() == f"s3://{bucket}/gdpval/{layout.report('full')}", made.stderr
    page = open_storage(f"s3://{bucket}/gdpval").get_text(layout.report("full"))
    cut = failed_in[f"s3://{bucket}/gdpval"]
    assert f'<span class="win">{cut} won</span>, <span class="loss">0 lost</span>, {TASKS - cut} tied' in page


def test_status_says_what_to_fix(tmp_path):
    for args, message in (
        ((), "give either --output with --run-name"),
        (("--output", str(tmp_path)), "--run-name is required"),
        (("--output", str(tmp_path), "--run-name", "nope"), "never prepared"),
    ):
        done = gdpval("status", *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)

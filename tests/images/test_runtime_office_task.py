"""Acceptance of the local runtime: `gdpval run` of a scripted task that needs python-pptx and LibreOffice
(build a pptx, convert it to PDF, render a page to PNG) succeeds in the full runtime, and fails with a
clear tool error in the host runtime; run.json and submission_info.json record which one ran.

The full runtime is the one `hack/setup.sh --test` unpacks (`gdpval runtime build`); without it the
full-runtime test fails with that command, it never skips."""

from __future__ import annotations

import json
from pathlib import Path

from gdpval.fakemodel.model import SCRIPT_BODY_FIELD
from gdpval.sandbox import runtime
from gdpval.storage import layout
from support.attacks import Run
from support.cli import gdpval, run_args
from support.office_task import FILES, HOST_ERRORS, MADE, STEPS

PNG = b"\x89PNG\r\n\x1a\n"


def office_run(dataset: Path, model_url: str, output: Path, choice: str, steps: list[dict[str, str]] = STEPS) -> Run:
    extra = ["--limit", "1", "--isolation", "bwrap", "--sandbox-runtime", choice, "--extra-body", json.dumps({SCRIPT_BODY_FIELD: steps})]
    done = gdpval(*run_args(dataset, model_url, output, *extra), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return Run(done.returncode, done.stdout, done.stderr, output)


def deliverables(run: Run) -> dict[str, bytes]:
    """The files the attempt committed (storage keys from the layout, not spelled out here)."""
    (result,) = run.output.glob("runs/t/samples/*/attempt-1/result.json")
    sample = result.parent.parent.name
    folder = run.output / layout.deliverables("t", sample, 1)
    return {path.name: path.read_bytes() for path in folder.iterdir()} if folder.is_dir() else {}


def recorded(run: Run) -> tuple[str, str]:
    (info,) = run.output.glob("runs/t/submission/**/submission_info.json")
    return json.loads((run.output / "runs/t/run.json").read_text())["runtime"], json.loads(info.read_text())["runtime"]


def test_the_office_task_succeeds_in_the_full_runtime(standin_dataset, scripted_model, tmp_path):
    full = runtime.current()
    assert full is not None and full.info is not None, f"no full runtime in {runtime.runtimes_dir()}: {runtime.BUILD_IT}"
    run = office_run(standin_dataset, scripted_model.base_url, tmp_path / "out", "full")
    assert f"sandbox runtime: full sandbox image {full.info.image} {full.info.digest}" in run.stderr
    made, listed = run.tool_results()[:2]
    assert MADE in made and all(name in listed for name in FILES), (made, listed)
    files = deliverables(run)
    assert sorted(files) == sorted(FILES)
    assert files["deck.pdf"].startswith(b"%PDF-") and files["page-1.png"].startswith(PNG) and files["deck.pptx"].startswith(b"PK")
    assert recorded(run) == (full.info.digest, full.info.digest)


def test_the_office_task_fails_with_a_clear_tool_error_on_the_host(standin_dataset, scripted_model, tmp_path):
    run = office_run(standin_dataset, scripted_model.base_url, tmp_path / "out", "host")
    assert "sandbox runtime: host" in run.stderr
    results = run.tool_results()[:2]
    assert all(error in result for error, result in zip(HOST_ERRORS, results, strict=True)), results
    assert not set(FILES) & set(deliverables(run))
    assert recorded(run) == ("host", "host")


# What the model can see of its own privileges and limits; each line is checked below.
HARDENING = """id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; ulimit -u
touch /usr/gdpval-probe 2>&1; unshare -U true 2>&1; echo unshare=$?; mount -o remount,rw / 2>&1; echo mount=$?"""


def test_the_sandbox_hardening_holds_over_the_full_runtime(standin_dataset, scripted_model, tmp_path):
    """The same user namespace, capabilities, seccomp filter and process limit as over the host's folders."""
    run = office_run(standin_dataset, scripted_model.base_url, tmp_path / "out", "full", [{"bash": HARDENING}])
    (out,) = run.tool_results()
    lines = out.splitlines()
    assert lines[:5] == ["1000", "CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2", "1024"], out
    assert "Read-only file system" in out and "unshare=1" in out and "mount=32" in out, out


def test_a_run_resumes_only_in_its_own_runtime(standin_dataset, scripted_model, tmp_path):
    office_run(standin_dataset, scripted_model.base_url, tmp_path / "out", "host", [{"bash": "true"}])
    extra = ["--limit", "1", "--isolation", "bwrap", "--sandbox-runtime", "full"]
    resumed = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path / "out", *extra), timeout=300)
    assert resumed.returncode == 2 and "ran its samples in runtime host" in resumed.stderr, resumed.stderr
    assert json.loads((tmp_path / "out/runs/t/run.json").read_text())["runtime"] == "host"

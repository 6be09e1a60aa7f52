"""The in-pod commands start a fresh interpreter on every sample pod, on busy nodes: each imports only
what it uses (issue 11). Read from `-X importtime` of the real `gdpval` entry point, so a module
imported by any path (the CLI module, the step, storage) counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gdpval.storage.local import LocalStorage
from support import runs
from support.cli import GDPVAL

RUN = "r1"
NEVER = {"rich", "kubernetes", "kopf", "pyarrow", "pandas", "gdpval.report", "gdpval.controller.effects.operator", "gdpval.fakemodel"}


def _imported(*args: str) -> tuple[dict, set[str]]:
    """The command's JSON line and the top-level packages (and gdpval modules) it imported."""
    done = subprocess.run([sys.executable, "-X", "importtime", GDPVAL, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return json.loads(done.stdout), {n if n.startswith("gdpval.") else n.split(".")[0] for n in names}


def _prepared(tmp_path: Path) -> tuple[Path, str]:
    out = tmp_path / "out"
    (entry,) = runs.entries([runs.task("t1")])
    storage = LocalStorage(out)
    runs.write_run(storage, RUN, [entry])
    runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, {}))
    return out, entry.sample.sample_id


def test_stage_imports_neither_the_model_client_nor_rich(tmp_path):
    out, sample = _prepared(tmp_path)
    printed, modules = _imported("stage", "--run-name", RUN, "--output", str(out), "--sample", sample, "--dest", str(tmp_path / "refs"))
    assert printed["sample"] == sample
    assert not modules & (NEVER | {"openai", "httpx", "gdpval.agent.client", "gdpval.runner.attempt", "gdpval.judge.models", "gdpval.sandbox.local"})


def test_sample_imports_the_model_client_but_nothing_of_the_operator_or_report(tmp_path):
    out, sample = _prepared(tmp_path)
    printed, modules = _imported("sample", "--run-name", RUN, "--output", str(out), "--sample", sample, "--attempt", "1")
    assert printed["status"] == "succeeded"  # committed already: the step returns before any sandbox call
    assert "openai" in modules  # the probe sees the lazy imports
    assert not modules & NEVER


def test_sample_leaves_out_the_async_transport_openai_would_import(tmp_path):
    """aiohttp is in the image for the operator; openai imports it when it can, and the agent never uses it."""
    out, sample = _prepared(tmp_path)
    args = ["sample", "--run-name", RUN, "--output", str(out), "--sample", sample, "--attempt", "1"]
    probe = (
        "import atexit, runpy, sys; "
        "atexit.register(lambda: print(sorted(m for m in ('openai', 'aiohttp') if m in sys.modules), file=sys.stderr)); "
        f"sys.argv = {[GDPVAL, *args]!r}; runpy.run_path({GDPVAL!r}, run_name='__main__')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["status"] == "succeeded"
    assert done.stderr.strip().splitlines()[-1] == "['openai']"

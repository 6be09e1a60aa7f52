"""`make test`'s session machinery across a real xdist session: the ready-first scheduler with a
cluster-only worker, and the timeline it writes (a clean clone has no `.cache` yet)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from infra.paths import REPO_ROOT
from infra.schedule import GENERAL_WORKERS


def test_a_session_with_a_cluster_only_worker_runs_everything_on_the_others_and_times_it(tmp_path) -> None:
    timeline = tmp_path / "absent" / "test-timeline.tsv"
    env = {**os.environ, "GDPVAL_TEST_TIMELINE": str(timeline)}
    workers = GENERAL_WORKERS + 1
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers), "--dist", "load", "tests/infra/test_schedule.py"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("\t") for line in timeline.read_text().splitlines()]
    phases = Counter((row[2], row[4]) for row in rows)
    tests = {row[5] for row in rows}
    assert len(tests) >= 2 * workers  # enough for xdist to hand out batches
    assert phases == {(phase, "passed"): len(tests) for phase in ("setup", "call", "teardown")}
    assert {row[3] for row in rows} <= {f"gw{n}" for n in range(GENERAL_WORKERS)}  # none is a cluster test
    assert all(float(row[0]) <= float(row[1]) for row in rows)


NESTED_CONFTEST = """
import os
from pathlib import Path

from infra.schedule import ReadyFirstScheduling


def pytest_xdist_make_scheduler(config, log):
    return ReadyFirstScheduling(config, log, Path(os.environ["READY_DIR"]))
"""

GENERAL_TESTS = """
import os
import time
from pathlib import Path

import pytest


def cluster_runs():
    started = Path(os.environ["STARTED"])
    return len(started.read_text().split()) if started.exists() else 0


@pytest.mark.parametrize("n", range(2 * {workers} + 2))
def test_waits_for_the_cluster_tests(n):
    Path(os.environ["READY_DIR"], "cluster").touch()
    deadline = time.monotonic() + 60
    while cluster_runs() < {cluster_tests}:
        assert time.monotonic() < deadline, "the cluster tests did not all run while every general worker was busy"
        time.sleep(0.1)
"""

CLUSTER_TESTS = """
import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("n", range({cluster_tests}))
def test_marks_its_start(n):
    with Path(os.environ["STARTED"]).open("a") as started:
        started.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_the_cluster_only_worker_runs_the_cluster_tier_while_the_others_are_busy(tmp_path) -> None:
    """Every general worker sits in a test until all cluster tests have run, and none completes
    before: only the scheduler's watch on the ready marker hands the cluster tests out, and the last
    one runs only if the cluster-only worker is told that no more will come (a worker holds its last
    test until it gets a next one or the word to stop)."""
    cluster_tests = 3
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(NESTED_CONFTEST)
    for folder, source in (("general", GENERAL_TESTS), ("cluster", CLUSTER_TESTS)):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        source = source.format(workers=GENERAL_WORKERS, cluster_tests=cluster_tests)
        (tmp_path / "tests" / folder / f"test_{folder}.py").write_text(source)  # basenames differ: no __init__.py
    ready, started = tmp_path / "ready", tmp_path / "started"
    ready.mkdir()
    env = {**os.environ, "READY_DIR": str(ready), "STARTED": str(started), "PYTHONPATH": str(REPO_ROOT / "tests")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(GENERAL_WORKERS + 1), "--dist", "load", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert started.read_text().split() == [f"gw{GENERAL_WORKERS}"] * cluster_tests

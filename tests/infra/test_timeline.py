"""`make test`'s session machinery across a real xdist session: the ready-first scheduler with a
cluster-only worker, and the timeline it writes (a clean clone has no `.cache` yet)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

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


def lines(name):
    path = Path(os.environ[name])
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("n", range(2 * {workers} + 2))
def test_waits_for_the_cluster_tests(n):
    with Path(os.environ["BUSY"]).open("a") as busy:
        busy.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    if len(set(lines("BUSY"))) == {workers}:  # every general worker holds its tests: none takes a cluster test
        Path(os.environ["READY_DIR"], "cluster").touch()
    deadline = time.monotonic() + 60
    while len(lines("STARTED")) < {cluster_tests}:
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


FEW_TESTS = """
import pytest


@pytest.mark.parametrize("n", range({workers} + 1))
def test_passes(n):
    pass
"""


def _nested_session(tmp_path, sources: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """A session of the ready-first scheduler with a cluster-only worker over `sources` (folder under
    tests/ -> test module), its ready markers in `tmp_path/ready`."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(NESTED_CONFTEST)
    for folder, source in sources.items():
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / f"test_{folder}.py").write_text(source)  # basenames differ: no __init__.py
    (tmp_path / "ready").mkdir()
    env = {
        **os.environ,
        "READY_DIR": str(tmp_path / "ready"),
        "STARTED": str(tmp_path / "started"),
        "BUSY": str(tmp_path / "busy"),
        "PYTHONPATH": str(REPO_ROOT / "tests"),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(GENERAL_WORKERS + 1), "--dist", "load", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("cluster_tests", [1, 3])
def test_the_cluster_only_worker_runs_the_cluster_tier_while_the_others_are_busy(tmp_path, cluster_tests) -> None:
    """Every general worker sits in a test until all cluster tests have run, and the cluster is ready
    only once they all do: the scheduler's watch on the ready marker hands the cluster tests out
    (unless the marker comes before the first hand-out reaches the cluster-only worker), and the
    last one runs only if the cluster-only worker is told that no more will come (a worker holds its
    last test until it gets a next one or the word to stop): one cluster test alone, or the third
    sent while the second runs."""
    sources = {"general": GENERAL_TESTS, "cluster": CLUSTER_TESTS}
    sources = {folder: source.format(workers=GENERAL_WORKERS, cluster_tests=cluster_tests) for folder, source in sources.items()}
    done = _nested_session(tmp_path, sources, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "started").read_text().split() == [f"gw{GENERAL_WORKERS}"] * cluster_tests


def test_a_session_of_fewer_tests_than_two_a_worker_ends(tmp_path) -> None:
    """xdist's first hand-out of a small session sends each worker one test in turn; the cluster-only
    worker takes none before the cluster is ready, so one test is left over while every general
    worker holds one and waits for a second before it runs the first."""
    done = _nested_session(tmp_path, {"general": FEW_TESTS.format(workers=GENERAL_WORKERS)}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{GENERAL_WORKERS + 1} passed" in done.stdout

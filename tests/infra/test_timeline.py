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

"""The test timeline (`make test`) across a real xdist session: a clean clone has no `.cache` yet."""

from __future__ import annotations

import os
import subprocess
import sys

from infra.paths import REPO_ROOT


def test_the_timeline_makes_its_folder_and_records_each_phase(tmp_path) -> None:
    timeline = tmp_path / "absent" / "test-timeline.tsv"
    env = {**os.environ, "GDPVAL_TEST_TIMELINE": str(timeline)}
    node = "tests/infra/test_schedule.py::test_phases_come_from_the_folders"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", "--dist", "load", node],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("\t") for line in timeline.read_text().splitlines()]
    assert [(row[2], row[3], row[4], row[5]) for row in rows] == [(phase, "gw0", "passed", node) for phase in ("setup", "call", "teardown")]
    assert all(float(row[0]) <= float(row[1]) for row in rows)

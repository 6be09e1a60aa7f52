"""`gdpval prepare` as the prepare Job runs it: a run folder of another owner exits with the conflict
code and a one-line error (the refusal itself: tests/unit/test_run_owner.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gdpval import contract
from gdpval.manifest import RunOwner
from gdpval.storage import layout
from support import runs

OWNER = RunOwner(namespace="team", name="r1", uid="0f3c9a7e-5b1d")
RUN = layout.cluster_run(OWNER.namespace, OWNER.name, OWNER.uid)


def test_the_prepare_command_exits_with_the_conflict_code(tmp_path):
    storage, record = runs.owned(tmp_path / "out", RUN, None)
    settings = record.settings.model_copy(update={"output": record.settings.output.model_copy(update={"url": str(tmp_path / "out")})})
    done = subprocess.run(
        [str(Path(sys.executable).parent / "gdpval"), "prepare", "--run-name", RUN, "--owner", "team/r1/0f3c9a7e-5b1d", "--cache-dir", str(tmp_path / "c")],
        env={"PATH": "/usr/bin:/bin", contract.SETTINGS_ENV: json.dumps(settings.wire())},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == contract.EXIT_RUN_CONFLICT, done.stderr
    assert done.stderr.startswith("error: ") and "belongs to a run without an owner" in done.stderr

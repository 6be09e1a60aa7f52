"""A module fixture's costly result, computed once per session and shared by the xdist workers.

A module-scoped fixture runs once per worker that takes one of the module's tests, and the load
scheduler spreads a parametrised module over every worker: importing the paper's packages in the full
image took 120 to 160 s each time, four times in a session where two would do, beside the cluster
tier. The first worker computes under a file lock and writes the result; the others wait and read it."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def shared_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's own folder: the workers' common parent under xdist, else the base temp."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def once_per_session(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], Any]) -> Any:
    """compute()'s JSON result, computed by the first caller of the session; a failed compute writes nothing."""
    folder = shared_dir(config, tmp_path_factory)
    result = folder / f"{name}.json"
    with (folder / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            return json.loads(result.read_text())
        value = compute()
        partial = folder / f"{name}.json.part"
        partial.write_text(json.dumps(value))
        partial.replace(result)
        return value

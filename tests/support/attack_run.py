"""Fixtures of the attack suite (tests/security, and its full-runtime test in tests/images): a one-task
dataset, the scripted model, and `gdpval run` as root or as an unprivileged user (uid 65534), with canary
credentials in the runner's environment. A plugin the root conftest registers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdpval.fakemodel.model import SCRIPT_BODY_FIELD
from gdpval.fakemodel.server import start_background
from support.attacks import CANARIES, Run
from support.cli import GDPVAL
from support.standins import make_standin_dataset


@pytest.fixture(scope="session")
def shared_root() -> Iterator[Path]:
    """A folder the unprivileged runner can read (pytest's own tmp folder is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="gdpval-sec-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def attack_dataset(sample_dataset: Path, shared_root: Path) -> Path:
    dataset = make_standin_dataset(sample_dataset, shared_root / "dataset")
    for path in [dataset, *dataset.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dataset


@pytest.fixture(scope="session")
def attack_model() -> Iterator[object]:
    with start_background(host="127.0.0.1", port=0) as server:
        yield server


def as_user(uid: int) -> list[str]:
    return [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


@pytest.fixture
def run_script(attack_dataset: Path, attack_model, shared_root: Path):
    """`gdpval run` of one task whose model plays the given tool calls, as root or as uid 65534."""

    def run(steps: list[dict[str, str]], uid: int, *extra: str, timeout: float = 120) -> Run:
        base = Path(tempfile.mkdtemp(dir=shared_root))
        for sub in ("out", "home", "tmp"):
            (base / sub).mkdir()
        if uid:
            for path in [base, *base.rglob("*")]:
                os.chown(path, uid, uid)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(base / "home"),
            "TMPDIR": str(base / "tmp"),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **CANARIES,
        }
        body = json.dumps({SCRIPT_BODY_FIELD: steps})
        argv = [*as_user(uid), GDPVAL, "run", "--dataset", str(attack_dataset), "--model", "scripted", "--base-url", attack_model.base_url]
        argv += ["--output", str(base / "out"), "--run-name", "t", "--limit", "1", "--isolation", "bwrap", "--extra-body", body, *extra]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=base)
        return Run(done.returncode, done.stdout, done.stderr, base / "out")

    return run

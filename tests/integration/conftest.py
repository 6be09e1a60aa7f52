"""Fixtures of the CLI-level integration tests: the 12-task sample with stand-in reference files,
and the scripted model over HTTP. Under their own names, so a test module's local fixtures of the
same purpose keep working until it moves to these."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval.fakemodel.server import start_background
from support.standins import make_standin_dataset


@pytest.fixture(scope="session")
def standin_dataset(sample_dataset, tmp_path_factory) -> Path:
    """Read-only for every test, so one copy serves the session."""
    return make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("standin-dataset"))


@pytest.fixture(scope="module")
def scripted_model():
    """One server per module: a module that holds or counts replies sees only its own requests."""
    with start_background(host="127.0.0.1", port=0) as server:
        yield server

"""Every test here uses the full sandbox image or its runtime: wait for (or make) them first.

Also the fixtures of the full-image tests that run `gdpval run`: the stand-in dataset and the
scripted model."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval.fakemodel.server import start_background
from support.standins import make_standin_dataset


@pytest.fixture(autouse=True)
def _built(full_runtime) -> None:
    pass


@pytest.fixture(scope="session")
def standin_dataset(sample_dataset, tmp_path_factory) -> Path:
    return make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("standin-dataset"))


@pytest.fixture(scope="module")
def scripted_model():
    with start_background(host="127.0.0.1", port=0) as server:
        yield server

"""Every test here uses the full sandbox image or its runtime: wait for (or make) them first.
The stand-in dataset and the scripted model come from tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _built(full_runtime) -> None:
    pass

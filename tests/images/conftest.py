"""Every test here uses the full sandbox image or its runtime: wait for (or make) them first."""

import pytest


@pytest.fixture(autouse=True)
def _built(full_runtime) -> None:
    pass

"""Package names loaded on first use: each comes from its home module, an unknown one is an AttributeError."""

from __future__ import annotations

import pytest

import gdpval.judge
import gdpval.sandbox
from gdpval.judge.models import LABEL
from gdpval.sandbox.client import SandboxClient


def test_names_come_from_their_home_modules_and_unknown_names_are_refused():
    assert gdpval.judge.LABEL == LABEL and gdpval.sandbox.SandboxClient is SandboxClient
    with pytest.raises(AttributeError, match="'gdpval.sandbox' has no attribute 'Nothing'"):
        _ = gdpval.sandbox.Nothing  # type: ignore[attr-defined]
    assert sorted(gdpval.judge.__all__) == sorted(["LABEL", "JudgeResults", "SampleScore", "load_results", "load_scores"])

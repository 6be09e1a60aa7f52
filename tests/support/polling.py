"""Waiting on an event with a deadline, never on a fixed amount of time."""

from __future__ import annotations

import time
from typing import Any


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5) -> Any:
    """Poll until `predicate` returns something truthy; fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

"""Reading a run's progress from storage keys alone: which samples are committed, which attempt is next."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gdpval.storage import layout

_ATTEMPT = re.compile(r"^runs/[^/]+/samples/([^/]+)/attempt-(\d+)/(.+)$")


@dataclass
class SampleProgress:
    attempts: set[int] = field(default_factory=set)
    committed: set[int] = field(default_factory=set)

    @property
    def next_attempt(self) -> int:
        return max(self.attempts, default=0) + 1

    @property
    def last_committed(self) -> int | None:
        return max(self.committed, default=None)


def progress_from_keys(keys: Iterable[str]) -> dict[str, SampleProgress]:
    """Every attempt folder seen counts as used, so a half-written attempt is never reused."""
    progress: dict[str, SampleProgress] = {}
    for key in keys:
        match = _ATTEMPT.match(key)
        if not match:
            continue
        sample, number, rest = match.group(1), int(match.group(2)), match.group(3)
        entry = progress.setdefault(sample, SampleProgress())
        entry.attempts.add(number)
        if rest == layout.RESULT:
            entry.committed.add(number)
    return progress

"""Reading a run's progress from storage keys alone: which samples are committed, which attempt is next."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gdpval.storage import layout


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
        parsed = layout.parse_attempt_key(key)
        if parsed is None:
            continue
        entry = progress.setdefault(parsed.sample, SampleProgress())
        entry.attempts.add(parsed.attempt)
        if parsed.is_result:
            entry.committed.add(parsed.attempt)
    return progress

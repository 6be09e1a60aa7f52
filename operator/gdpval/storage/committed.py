"""The committed-attempt choice: which attempt of a sample counts, read from storage keys alone.

An attempt is committed once its result.json exists (the runner writes it last); a sample's committed
attempt is its highest committed one, and attempts without a result.json are ignored. The submission,
the judges, the readiness check and the report all choose through here, so they never disagree.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import BaseModel

from gdpval.storage import layout
from gdpval.storage.base import Storage


class CommittedAttempt(BaseModel):
    """A sample's chosen attempt: its number and the deliverable files present in storage."""

    attempt: int
    present: set[str]


def committed_attempts(keys: list[str], run: str) -> dict[str, CommittedAttempt]:
    """For each sample, the highest attempt with a result.json and its deliverable files (pure)."""
    files: dict[tuple[str, int], list[layout.AttemptFile]] = defaultdict(list)
    for key in keys:
        parsed = layout.parse_attempt_key(key)
        if parsed is not None and parsed.run == run:
            files[(parsed.sample, parsed.attempt)].append(parsed)
    chosen: dict[str, CommittedAttempt] = {}
    for (sample, n), parsed_files in sorted(files.items()):
        if any(f.is_result for f in parsed_files):
            present = {f.deliverable for f in parsed_files if f.deliverable is not None}
            chosen[sample] = CommittedAttempt(attempt=n, present=present)
    return chosen


def list_committed(storage: Storage, run: str) -> dict[str, CommittedAttempt]:
    """The run's committed attempts, from one listing of its samples' folder."""
    return committed_attempts(list(storage.list(layout.samples(run))), run)

"""What a judge's calls spent, recorded as each call returns, before any verdict is committed.

A judge killed with -9 loses what it held in memory: the tries of a sample it had not scored, the first
order of a pair whose second order was still out. Each answered call's usage is written at once under
the sample (for its judging method and judge model), and a sample's judged usage is everything recorded
for it, earlier sessions included, so a resumed run counts what was spent before the kill. A call still
in flight at the kill cannot be counted: its usage never reached us (the provider may bill it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError

from gdpval.judge.usage import Usage
from gdpval.storage import NotFound, Storage, layout


class Spent(BaseModel):
    """One answered call: what it asked (a pairwise call's digest; empty for the rubric judge) and its usage."""

    digest: str = ""
    usage: Usage


@dataclass(frozen=True)
class Journal:
    """The spend records of one sample's judging by one method and model."""

    storage: Storage
    prefix: str

    @classmethod
    def of(cls, storage: Storage, run: str, method: str, model: str, sample: str) -> Journal:
        return cls(storage, layout.judge_spend(run, method, layout.model_key(model), sample))

    def record(self, usage: Usage, digest: str = "") -> None:
        """Written once per answered call, under a fresh name: concurrent or resumed judges never overwrite one."""
        self.storage.put_text(f"{self.prefix}/{uuid.uuid4().hex}.json", Spent(digest=digest, usage=usage).model_dump_json())

    def earlier(self) -> list[Spent]:
        """Every record so far; an unreadable one is left out (it spent nothing we can know)."""
        found = []
        for key in self.storage.list(self.prefix):
            try:
                found.append(Spent.model_validate_json(self.storage.get_bytes(key)))
            except (NotFound, ValidationError):
                continue
        return found


def spent_on(records: list[Spent], digest: str | None = None) -> Usage:
    """The usage of the records (of one call's digest, when given)."""
    return sum((r.usage for r in records if digest is None or r.digest == digest), Usage())

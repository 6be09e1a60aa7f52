"""The run's ledger: one short line per sample in a ConfigMap the GdpvalRun owns.

It records what pods and S3 alone cannot tell after a crash: which attempt is in flight (written
*before* its pod is created) and how each finished attempt ended, including infrastructure
failures that left no result.json (written *before* the pod is deleted). Committed results stay in
S3; the ledger only caches their outcome and token counts so status needs no S3 listing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gdpval.runner.state import SampleProgress
from gdpval.sample import SampleResult, SampleStatus

_REASON = re.compile(r"[^A-Za-z0-9_.:-]+")


class Outcome(StrEnum):
    running = "r"  # a pod for `attempt` was requested and has not ended
    succeeded = "s"  # result.json committed with status succeeded
    failed = "f"  # result.json committed with status failed (the model side)
    lost = "x"  # the attempt ended without a result (pod failed, stuck, deleted)


@dataclass(frozen=True)
class Committed:
    """What the operator needs from a result.json."""

    succeeded: bool
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    api_errors: int = 0

    @classmethod
    def of(cls, result: SampleResult) -> Committed:
        return cls(
            succeeded=result.status == SampleStatus.succeeded,
            reason=str(result.error_kind or ""),
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            api_errors=result.api_errors,
        )


@dataclass(frozen=True)
class Entry:
    attempt: int
    outcome: Outcome
    pods: int = 1  # pods created for the sample, re-creations included
    ended: int = 0  # unix seconds the last attempt ended; the retry backoff counts from it
    input_tokens: int = 0
    output_tokens: int = 0
    api_errors: int = 0
    reason: str = ""  # why the last attempt failed
    recreated: int = 0  # pods of this attempt that vanished or were disrupted before writing anything, re-created

    def encode(self) -> str:
        """Seven numbers, `+recreated` when nonzero (a reason never starts with "+"), then the reason."""
        fields = (self.attempt, self.outcome.value, self.pods, self.ended, self.input_tokens, self.output_tokens, self.api_errors)
        text = " ".join(str(f) for f in fields) + (f" +{self.recreated}" if self.recreated else "")
        return text + (f" {self.reason}" if self.reason else "")

    @classmethod
    def decode(cls, text: str) -> Entry:
        parts = text.split(" ")
        attempt, outcome, pods, ended, tin, tout, errs = parts[:7]
        rest = parts[7:]
        recreated = int(rest.pop(0)[1:]) if rest and rest[0].startswith("+") else 0
        return cls(int(attempt), Outcome(outcome), int(pods), int(ended), int(tin), int(tout), int(errs), " ".join(rest), recreated)

    def start(self, attempt: int) -> Entry:
        """A new pod for a new `attempt`."""
        return replace(self, attempt=attempt, outcome=Outcome.running, pods=self.pods + 1, ended=0, reason="", recreated=0)

    def recreate(self) -> Entry:
        """Another pod for the same attempt: the last one left nothing behind."""
        return replace(self, pods=self.pods + 1, recreated=self.recreated + 1)

    def finish(self, now: float, committed: Committed | None, reason: str = "") -> Entry:
        if committed is None:
            return replace(self, outcome=Outcome.lost, ended=int(now), reason=clean_reason(reason or "NoResult"))
        return replace(
            self,
            outcome=Outcome.succeeded if committed.succeeded else Outcome.failed,
            ended=int(now),
            input_tokens=self.input_tokens + committed.input_tokens,
            output_tokens=self.output_tokens + committed.output_tokens,
            api_errors=self.api_errors + committed.api_errors,
            reason="" if committed.succeeded else clean_reason(committed.reason or "ModelFailure"),
        )

    @property
    def ended_attempt(self) -> bool:
        return self.outcome != Outcome.running


def first_attempt() -> Entry:
    return Entry(attempt=1, outcome=Outcome.running, pods=1)


def clean_reason(text: str) -> str:
    return _REASON.sub("-", text)[:64]


Ledger = dict[str, Entry]


def decode(data: Mapping[str, str] | None) -> Ledger:
    return {k: Entry.decode(v) for k, v in (data or {}).items()}


def encode(ledger: Mapping[str, Entry]) -> dict[str, str]:
    return {k: ledger[k].encode() for k in sorted(ledger)}


def rebuild(progress: Mapping[str, SampleProgress], results: Mapping[tuple[str, int], Committed], now: float) -> Ledger:
    """A ledger from S3 alone (when the ConfigMap is gone): attempt folders and committed results.

    An unfinished last attempt is marked in flight, so the usual lost-pod check decides it.
    """
    ledger: Ledger = {}
    for sample, seen in progress.items():
        if not seen.attempts:
            continue
        last = max(seen.attempts)
        entry = Entry(attempt=last, outcome=Outcome.running, pods=len(seen.attempts))
        for number in sorted(seen.committed):
            committed = results.get((sample, number))
            if committed is not None:
                entry = replace(entry, attempt=number).finish(now, committed)
        if last not in seen.committed:
            entry = replace(entry, attempt=last, outcome=Outcome.running, ended=0)
        ledger[sample] = entry
    return ledger

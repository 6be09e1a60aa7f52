"""The run's ledger: one short line per sample, in flight in a ConfigMap the GdpvalRun owns, ended in S3.

It records what pods and S3 alone cannot tell after a crash: which attempt is in flight (written
*before* its pod is created) and how each finished attempt ended, including infrastructure
failures that left no result.json (written *before* the pod is deleted). Committed results stay in
S3; the ledger only caches their outcome and token counts so status needs no S3 listing.

The ConfigMap holds the entries in flight (bounded by parallelism) and fewer than `ARCHIVE_BATCH`
ended ones; ended entries move in batches to numbered archive segments in the run's folder, each
written before the ConfigMap that drops them and counts it (`SEGMENTS_KEY`). So the object stays
far below the 1 MiB limit whatever the number of samples, and a reader merges segments in order,
then the ConfigMap, each later one overriding: a segment written by a pass that died before its
ConfigMap write is beyond the count, never read, and written again by a later pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gdpval.sample import SampleResult, SampleStatus
from gdpval.storage.progress import SampleProgress

_REASON = re.compile(r"[^A-Za-z0-9_.:-]+")


class Outcome(StrEnum):
    running = "r"  # a pod for `attempt` was requested and has not ended
    succeeded = "s"  # result.json committed with status succeeded
    failed = "f"  # result.json committed with status failed (the model side)
    lost = "x"  # the attempt ended without a result (pod failed, stuck, deleted)
    paused = "p"  # in flight, its pod stopped by spec.suspend: it starts again under the same attempt
    held = "o"  # in flight, its pod ended by the model endpoint's outage: it starts again, same attempt, once the endpoint answers
    queued = "q"  # in flight, its pod started ahead deleted before its go while the run was held: it starts again, same attempt, in its turn


IN_FLIGHT = (Outcome.running, Outcome.paused, Outcome.held, Outcome.queued)
MODEL_UNAVAILABLE = "ModelUnavailable"  # the reason of a held attempt (kept while its next pod runs: that pod probes)


@dataclass(frozen=True)
class ResultSummary:
    """What the operator needs from a result.json."""

    succeeded: bool
    reason: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    api_errors: int = 0
    rate_limited: int = 0

    @classmethod
    def of(cls, result: SampleResult) -> ResultSummary:
        return cls(
            succeeded=result.status == SampleStatus.succeeded,
            reason=str(result.error_kind or ""),
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            api_errors=result.api_errors,
            rate_limited=result.rate_limited,
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

    def pause(self) -> Entry:
        """The run was suspended: this attempt's pod is stopped, and the attempt is not spent."""
        return replace(self, outcome=Outcome.paused)

    def hold(self, now: float) -> Entry:
        """The outage ended this attempt's pod before it committed anything: the attempt is not spent."""
        return replace(self, outcome=Outcome.held, ended=int(now), reason=MODEL_UNAVAILABLE)

    def queue(self) -> Entry:
        """The run was held while this attempt's pod waited ahead of its turn: the pod goes, the attempt is not spent."""
        return replace(self, outcome=Outcome.queued)

    def resume(self) -> Entry:
        """A new pod for the paused, held or queued attempt (none is a loss: `recreated` stays)."""
        return replace(self, outcome=Outcome.running, pods=self.pods + 1)

    def recreate(self) -> Entry:
        """Another pod for the same attempt: the last one left nothing behind."""
        return replace(self, pods=self.pods + 1, recreated=self.recreated + 1)

    def finish(self, now: float, committed: ResultSummary | None, reason: str = "") -> Entry:
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
        return self.outcome not in IN_FLIGHT


def first_attempt() -> Entry:
    return Entry(attempt=1, outcome=Outcome.running, pods=1)


def clean_reason(text: str) -> str:
    return _REASON.sub("-", text)[:64]


Ledger = dict[str, Entry]


# A key of the ConfigMap's data that no sample id has (they never start with a dot): the segment count.
SEGMENTS_KEY = ".archived-segments"
# Ended entries kept in the ConfigMap before they move to S3 together (one segment per batch).
ARCHIVE_BATCH = 256


def decode(data: Mapping[str, str] | None) -> Ledger:
    return {k: Entry.decode(v) for k, v in (data or {}).items() if k != SEGMENTS_KEY}


def segments_of(data: Mapping[str, str] | None) -> int:
    """How many archive segments the ConfigMap counts (0 for a ledger written before archiving)."""
    return int((data or {}).get(SEGMENTS_KEY, "0"))


@dataclass(frozen=True)
class Split:
    """Where a ledger's entries go: the ConfigMap, and a new archive segment (empty: none this time)."""

    cluster: Ledger
    archive: Ledger


def split(ledger: Mapping[str, Entry], archived: Mapping[str, Entry], batch: int | None = None) -> Split:
    """In-flight entries stay in the cluster; ended ones not archived as they are go to S3 once `batch` gather."""
    batch = ARCHIVE_BATCH if batch is None else batch
    fresh: Ledger = {}
    in_flight: Ledger = {}
    for key, entry in ledger.items():
        kept = archived.get(key)
        if kept is entry:  # most of a long run: archived and unchanged since
            continue
        if not entry.ended_attempt:
            in_flight[key] = entry
        elif kept != entry:
            fresh[key] = entry
    if fresh and len(fresh) >= batch:
        return Split(in_flight, fresh)
    return Split(in_flight | fresh, {})


def encode_cluster(cluster: Mapping[str, Entry], segments: int) -> dict[str, str]:
    """The ConfigMap's data: its entries and the count of segments written before it."""
    return encode(cluster) | ({SEGMENTS_KEY: str(segments)} if segments else {})


def encode_segment(entries: Mapping[str, Entry]) -> str:
    """A segment as JSON (sample ids are any text there, unlike ConfigMap keys)."""
    return json.dumps({"entries": encode(entries)}, ensure_ascii=False, sort_keys=True)


def decode_segment(text: str) -> Ledger:
    return decode(json.loads(text)["entries"])


def merge(segments: Iterable[Ledger], cluster: Ledger) -> tuple[Ledger, Ledger]:
    """The whole ledger and the archived part, from segments in order then the ConfigMap."""
    archived: Ledger = {}
    for segment in segments:
        archived.update(segment)
    return archived | cluster, archived


def encode(ledger: Mapping[str, Entry]) -> dict[str, str]:
    return {k: ledger[k].encode() for k in sorted(ledger)}


def rebuild(progress: Mapping[str, SampleProgress], results: Mapping[tuple[str, int], ResultSummary], now: float) -> Ledger:
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

"""Reading a run's records from storage (the only I/O of the report): run.json, manifest, results, transcripts.

A sample's committed result is the attempt gdpval.storage.committed chooses, as for the submission.
Transcripts are read as written (JSON lines, lone surrogates kept escaped), and a line that does not
parse is kept as text, never fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gdpval.budget import Spend
from gdpval.errors import GdpvalError
from gdpval.judge.store import load_pair_results
from gdpval.judge.verdicts import PairResults
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.records import load_run, run_spend
from gdpval.report.grading import shown_keys
from gdpval.sample import SampleResult
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.committed import committed_attempts
from gdpval.storage.progress import progress_from_keys
from gdpval.submission.readiness import CheckResults, load_check


class ReportError(GdpvalError):
    """A run cannot be reported (an unreadable result)."""


@dataclass(frozen=True)
class JudgeItem:
    """One rubric item as the judge scored it, with its one-line reason."""

    criterion: str
    score: float
    points: float
    reason: str


@dataclass(frozen=True)
class JudgeFigure:
    """A local rubric judge's score of one sample: points over the rubric's maximum (a local estimate)."""

    score: float
    max_score: float
    items: tuple[JudgeItem, ...] = ()

    @property
    def share(self) -> float:
        return self.score / self.max_score if self.max_score else 0.0


@dataclass
class RunRecords:
    """Everything stored about one run that the report shows, read once."""

    record: RunRecord
    entries: list[ManifestEntry]
    results: dict[str, SampleResult] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # sample id -> committed attempt number
    transcripts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    scores: dict[str, JudgeFigure] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # samples with an attempt newer than their committed one (running, or cut short)
    check: CheckResults | None = None  # `gdpval check`'s grading readiness, when it has run
    pairwise: PairResults | None = None  # the pairwise judge's results against the gold, when it has run
    pngs: dict[str, bytes] = field(default_factory=dict)  # the judged run's page images the report embeds, by key
    spent: Spend = field(default_factory=Spend)  # what every committed attempt spent, against the run budget


def load_records(storage: Storage, run: str, transcripts: bool = True) -> RunRecords:
    """The run's records; `transcripts=False` skips the largest objects (a comparison needs none)."""
    record, entries = load_run(storage, run)
    listed = list(storage.list(layout.samples(run)))
    chosen = committed_attempts(listed, run)
    records = RunRecords(record, entries, scores=judge_scores(storage, run), started=uncommitted(listed), check=load_check(storage, run))
    records.pairwise = load_pair_results(storage, run)
    records.spent = run_spend(storage, run, record.settings.budget.prices)
    if records.pairwise is not None and transcripts:
        records.pngs = _pages(storage, shown_keys(records.pairwise))
    for entry in entries:
        sample = entry.sample.sample_id
        if sample not in chosen:
            continue
        keys = layout.attempt_keys(run, sample, chosen[sample].attempt)
        try:
            records.results[sample] = SampleResult.model_validate_json(storage.get_text(keys.result))
        except ValidationError as exc:
            raise ReportError(f"{storage.url(keys.result)} is not a valid result: {exc.errors()[0]['msg']}") from None
        records.attempts[sample] = chosen[sample].attempt
        if transcripts:
            records.transcripts[sample] = _transcript(storage, keys.transcript)
    return records


def uncommitted(keys: list[str]) -> set[str]:
    """Samples whose latest attempt folder has no result.json yet."""
    return {sample for sample, p in progress_from_keys(keys).items() if max(p.attempts) != p.last_committed}


def parse_transcript(text: str) -> list[dict[str, Any]]:
    """Transcript events; a line that is not a JSON object (a crash mid-write) becomes a `garbled` event."""
    events = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            event = None
        events.append(event if isinstance(event, dict) else {"event": "garbled", "content": line})
    return events


def _transcript(storage: Storage, key: str) -> list[dict[str, Any]]:
    try:
        return parse_transcript(storage.get_bytes(key).decode("utf-8", errors="replace"))
    except NotFound:
        return []


def _pages(storage: Storage, keys: list[str]) -> dict[str, bytes]:
    """The page images the report embeds; one that went missing is linked instead."""
    found = {}
    for key in keys:
        try:
            found[key] = storage.get_bytes(key)
        except NotFound:
            continue
    return found


def judge_scores(storage: Storage, run: str) -> dict[str, JudgeFigure]:
    """Scores the local judge stored for the run, read through its own reader; none while it has not run."""
    try:
        from gdpval.judge import load_scores
    except ImportError:  # a build without the judge
        return {}
    scores = load_scores(storage, run).items()
    return {
        sample: JudgeFigure(s.points, s.max_points, tuple(JudgeItem(i.criterion, i.score, i.points, i.reason) for i in s.items))
        for sample, s in scores
        if s.fraction is not None
    }

"""One attempt of one sample, the same in a local sandbox and in a pod.

Order matters: deliverables, then the transcript, then result.json. A crash before the last write
leaves no result, so the attempt counts as unfinished and is redone under a new attempt number.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import openai

from gdpval.agent.governor import Meter
from gdpval.agent.loop import AgentLoop, Clock, LoopOutcome, ToolBackend
from gdpval.agent.prompt import compose
from gdpval.agent.transcript import Transcript
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.runner.deliverables import collect, upload
from gdpval.sample import ErrorKind, SampleResult, SampleStatus
from gdpval.storage import Storage, layout


class AttemptCancelled(Exception):
    """The run is stopping: the attempt must not be committed, so a resume redoes it."""


class AttemptRedo(AttemptCancelled):
    """The attempt ended by an endpoint outage: not committed, it runs again under the same number."""


@dataclass(frozen=True)
class SandboxView:
    """Paths as the model sees them inside its sandbox."""

    workspace: str
    reference_root: str
    references: list[str]


@dataclass(frozen=True)
class Attempt:
    record: RunRecord
    entry: ManifestEntry
    number: int

    @property
    def sample_id(self) -> str:
        return self.entry.sample.sample_id

    @property
    def keys(self) -> layout.AttemptKeys:
        return layout.attempt_keys(self.record.run_name, self.sample_id, self.number)


def run_attempt(
    attempt: Attempt,
    storage: Storage,
    client: openai.OpenAI,
    tools: ToolBackend,
    view: SandboxView,
    host_workspace: Path,
    scratch: Path,
    clock: Clock | None = None,
    cancelled: Callable[[], bool] = lambda: False,
    warnings: list[str] | None = None,
    meter: Meter | None = None,
    redo: Callable[[SampleResult], bool] = lambda result: False,
) -> SampleResult:
    """Run the loop, upload what the model made, and commit the result last; `meter` counts the
    attempt's spend (the client's calls go through it), `redo` says a result is the outage's, not the model's."""
    clock = clock or Clock()
    started = time.time()
    settings = attempt.record.settings
    deadline = clock.now() + (settings.agent.sample_deadline_seconds or float("inf"))
    system, user = compose(settings.prompt, attempt.entry.task.prompt, view.workspace, view.reference_root, view.references)
    transcript_path = scratch / layout.TRANSCRIPT
    with Transcript(transcript_path) as transcript:
        loop = AgentLoop(client, settings.model, settings.agent, tools, transcript, deadline, clock, settings.prompt.finish)
        outcome = loop.run(system, user)
    if cancelled():
        raise AttemptCancelled(attempt.sample_id)
    result = _result(attempt, outcome, started)
    result.warnings = list(warnings or [])
    if meter is not None:
        priced = settings.budget.prices.known
        result.usage.cached_input_tokens = meter.spend.usage.cached_input_tokens
        result.cost = round(meter.spend.cost, 6) if priced else None
        result.rate_limited = meter.rate_limited
    if redo(result):
        raise AttemptRedo(attempt.sample_id)
    commit(attempt, storage, result, host_workspace, transcript_path)
    return result


def commit(attempt: Attempt, storage: Storage, result: SampleResult, host_workspace: Path | None, transcript: Path | None) -> SampleResult:
    """Upload deliverables and transcript, then write result.json: the commit marker."""
    if host_workspace is not None:
        caps = attempt.record.settings.deliverables
        collected = collect(host_workspace, max_file_bytes=caps.max_file_bytes, max_files=caps.max_files, max_total_bytes=caps.max_total_bytes)
        result.deliverable_files = upload(collected, storage, attempt.keys.deliverables)
        result.refused_files = list(collected.refused)
        result.renamed_files = list(collected.renamed)
    if transcript is not None and transcript.exists():
        storage.put_file(attempt.keys.transcript, transcript)
    result.finished_at = time.time()
    storage.put_text(attempt.keys.result, result.model_dump_json(indent=2))
    return result


def missing_references(attempt: Attempt, missing: list[str]) -> tuple[SampleResult | None, list[str]]:
    """Per dataset.missingReferences: the failed result to commit ('fail'), or the warnings to record ('skip')."""
    if not missing:
        return None, []
    if attempt.record.settings.dataset.missing_references == "fail":
        return failed_result(attempt, ErrorKind.missing_reference, f"reference files missing from the dataset: {', '.join(missing)}"), []
    return None, [f"ran without a reference file missing from the dataset: {path}" for path in missing]


def failed_result(attempt: Attempt, kind: ErrorKind, message: str) -> SampleResult:
    """A result for an attempt that never reached the model (e.g. a missing reference file)."""
    now = time.time()
    return _base(attempt, status=SampleStatus.failed, error_kind=kind, error=message, started_at=now)


def _result(attempt: Attempt, outcome: LoopOutcome, started: float) -> SampleResult:
    return _base(
        attempt,
        status=outcome.status,
        error_kind=outcome.error_kind,
        error=outcome.error,
        deliverable_text=outcome.text,
        steps=outcome.steps,
        usage=outcome.usage,
        api_errors=outcome.api_errors,
        finish_reason=outcome.finish_reason,
        unmetered_turns=outcome.unmetered_turns,
        started_at=started,
    )


def _base(attempt: Attempt, **fields) -> SampleResult:
    sample = attempt.entry.sample
    return SampleResult(sample_id=sample.sample_id, task_id=sample.task_id, repeat=sample.repeat, attempt=attempt.number, **fields)

"""One attempt of one sample, the same in a local sandbox and in a pod.

Order matters: deliverables, then the transcript, then result.json. A crash before the last write
leaves no result, so the attempt counts as unfinished and is redone under a new attempt number.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from pydantic import BaseModel, Field, ValidationError

from gdpval.agent.governor import Meter
from gdpval.agent.images import Viewer
from gdpval.agent.loop import AgentLoop, Clock, LoopOutcome, Resumed, ToolBackend
from gdpval.agent.prompt import compose
from gdpval.agent.transcript import Transcript
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.runner.deliverables import collect, upload
from gdpval.sample import ErrorKind, SampleResult, SampleStatus
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.progress import progress_from_keys

RESTORE_CHUNK = 6 << 20  # bytes of a workspace file per restoring tool call (base64 stays under the server's 16 MiB body cap)
RESTORE_TIMEOUT_S = 120.0


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
    resumed: Resumed | None = None,
) -> SampleResult:
    """Run the loop, upload what the model made, and commit the result last; `meter` counts the
    attempt's spend (the client's calls go through it), `redo` says a result is the outage's, not the
    model's, `resumed` is the conversation the run budget cut (its workspace already restored)."""
    clock = clock or Clock()
    started = time.time()
    settings = attempt.record.settings
    deadline = clock.now() + (settings.agent.sample_deadline_seconds or float("inf"))
    system, user = compose(settings.prompt, attempt.entry.task.prompt, view.workspace, view.reference_root, view.references)
    transcript_path = scratch / layout.TRANSCRIPT
    if resumed is not None and meter is not None:  # the sample's budget and cost go on from the cut attempt's
        meter.spend.add(resumed.usage, settings.budget.prices, resumed.cost)
    viewer = _viewer(tools, host_workspace) if settings.agent.view_images else None
    with Transcript(transcript_path) as transcript:
        loop = AgentLoop(client, settings.model, settings.agent, tools, transcript, deadline, clock, settings.prompt.finish, viewer)
        outcome = loop.run(system, user, resumed)
    if cancelled():
        raise AttemptCancelled(attempt.sample_id)
    result = _result(attempt, outcome, started)
    result.warnings = list(warnings or [])
    result.continues = resumed.attempt if resumed is not None else None
    if meter is not None:
        priced = settings.budget.prices.known
        result.usage.cached_input_tokens = meter.spend.usage.cached_input_tokens
        result.cost = round(meter.spend.cost, 6) if priced else None
        result.rate_limited = meter.rate_limited
    if redo(result):
        raise AttemptRedo(attempt.sample_id)
    commit(attempt, storage, result, host_workspace, transcript_path, outcome.messages)
    return result


def _viewer(tools: ToolBackend, host_workspace: Path) -> Viewer:
    """Imported only when a run offers pictures: the renderer's modules stay out of every other agent's start-up."""
    from gdpval.runner.viewer import SandboxViewer

    return SandboxViewer(tools, host_workspace)


def commit(
    attempt: Attempt,
    storage: Storage,
    result: SampleResult,
    host_workspace: Path | None,
    transcript: Path | None,
    conversation: list[dict[str, Any]] | None = None,
) -> SampleResult:
    """Upload deliverables and transcript (and a budget-cut attempt's conversation and workspace), then
    write result.json: the commit marker."""
    if host_workspace is not None:
        caps = attempt.record.settings.deliverables
        collected = collect(host_workspace, max_file_bytes=caps.max_file_bytes, max_files=caps.max_files, max_total_bytes=caps.max_total_bytes)
        result.deliverable_files = upload(collected, storage, attempt.keys.deliverables)
        result.refused_files = list(collected.refused)
        result.renamed_files = list(collected.renamed)
        if conversation is not None:
            _keep_conversation(attempt, storage, result.steps, conversation, host_workspace)
    if transcript is not None and transcript.exists():
        storage.put_file(attempt.keys.transcript, transcript)
    result.finished_at = time.time()
    storage.put_text(attempt.keys.result, result.model_dump_json(indent=2))
    return result


class Conversation(BaseModel):
    """What an attempt the run budget cut leaves for the next one: its messages and steps, and the
    workspace files it had (the key each is stored under -> its path in the workspace)."""

    messages: list[dict[str, Any]]
    steps: int
    files: dict[str, str] = Field(default_factory=dict)


def _keep_conversation(attempt: Attempt, storage: Storage, steps: int, messages: list[dict[str, Any]], host_workspace: Path) -> None:
    """The whole workspace (within the deliverable caps; links and devices refused as for deliverables) and the messages."""
    caps = attempt.record.settings.deliverables
    collected = collect(host_workspace, max_file_bytes=caps.max_file_bytes, max_files=caps.max_files, max_total_bytes=caps.max_total_bytes, folder=".")
    stored = set(upload(collected, storage, attempt.keys.workspace))
    files = {item.key: item.relpath for item in collected.files if item.key in stored}
    storage.put_text(attempt.keys.conversation, Conversation(messages=messages, steps=steps, files=files).model_dump_json())


def cut_conversation(storage: Storage, run: str, sample: str) -> tuple[SampleResult, Conversation] | None:
    """The sample's last committed result and what it left, when the run budget cut it; else None."""
    last = progress_from_keys(storage.list(layout.sample_root(run, sample))).get(sample)
    number = last.last_committed if last else None
    if number is None:
        return None
    keys = layout.attempt_keys(run, sample, number)
    try:
        result = SampleResult.model_validate_json(storage.get_text(keys.result))
        if result.error_kind != ErrorKind.budget:
            return None
        return result, Conversation.model_validate_json(storage.get_text(keys.conversation))
    except (NotFound, ValidationError):  # cut before conversations were kept, or unreadable: the sample starts afresh
        return None


def restore_workspace(storage: Storage, run: str, sample: str, cut: tuple[SampleResult, Conversation], tools: ToolBackend) -> Resumed:
    """Write the cut attempt's workspace files back through the sandbox's own python (as the sandbox's
    user, inside its limits, whatever its workspace is), then the conversation to go on with."""
    result, conversation = cut
    number = result.attempt
    prefix = layout.attempt_keys(run, sample, number).workspace
    for key, path in sorted(conversation.files.items()):
        data = storage.get_bytes(f"{prefix}/{key}")
        for start in range(0, max(len(data), 1), RESTORE_CHUNK):
            chunk = base64.b64encode(data[start : start + RESTORE_CHUNK]).decode()
            code = _RESTORE.format(path=path, mode="ab" if start else "wb", chunk=chunk)
            out = tools.call("python_exec", {"code": code}, RESTORE_TIMEOUT_S)
            if out.exit_code != 0:
                raise RuntimeError(f"could not restore {path} of attempt {number} into the workspace: {out.output[:300]}")
    return Resumed(conversation.messages, conversation.steps, number, result.usage, result.cost)


# Run by the sandbox's python with the workspace as its working folder; `path` was walked there, never `..` or absolute.
_RESTORE = """import base64, os
path = {path!r}
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path, {mode!r}) as fh:
    fh.write(base64.b64decode({chunk!r}))
"""


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

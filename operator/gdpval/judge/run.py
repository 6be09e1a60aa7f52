"""Judge a run: each sample's committed deliverables against its rubric, cached per sample so a run resumes.

A judge model that fails (HTTP errors, a reply that is not the scores asked for) is retried, then the
sample is recorded as a judge failure and the run goes on: the totals leave failed samples out.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from pydantic import ValidationError

from gdpval.errors import GdpvalError
from gdpval.judge import prompt, wire
from gdpval.judge.inputs import Inputs, render
from gdpval.judge.models import ItemScore, JudgeResults, RubricError, RubricItem, SampleScore, check_reply, parse_rubric
from gdpval.judge.request import JudgeOptions, call
from gdpval.judge.spend import Journal, spent_on
from gdpval.judge.store import load_scores, write_results, write_score
from gdpval.judge.usage import Usage
from gdpval.judge.workdir import remove_left_behind, work_folder
from gdpval.manifest import ManifestEntry
from gdpval.records import load_run
from gdpval.sample import SampleResult
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.committed import CommittedAttempt, list_committed


class JudgeError(GdpvalError):
    """The run cannot be judged (made on a dataset revision without rubrics)."""


@dataclass(frozen=True)
class Judged:
    """What judging a run did: the results written, where, and how many samples came from the cache."""

    results: JudgeResults
    uri: str
    cached: int


OnSample = Callable[[SampleScore, bool], None]


def judge_run(storage: Storage, run: str, client: openai.OpenAI, options: JudgeOptions, on_sample: OnSample | None = None) -> Judged:
    """Judge every sample not already judged for its committed attempt by this model, then write results.json."""
    remove_left_behind()
    record, entries = load_run(storage, run)
    if entries and not any(e.task.rubric_json for e in entries):
        raise JudgeError(f"run {run!r} has no rubric_json in any task: it was made on a dataset revision without rubrics; judge a run of the current revision")
    inputs = Inputs(storage, record, options.cache_dir)
    attempts = list_committed(storage, run)
    cache = load_scores(storage, run)

    def one(entry: ManifestEntry) -> tuple[SampleScore, bool]:
        committed = attempts.get(entry.sample.sample_id)
        previous = cache.get(entry.sample.sample_id)
        if reusable(previous, committed, options.model):
            assert previous is not None
            outcome = (previous, True)
        else:
            score = judge_sample(storage, run, entry, committed, client, options, inputs)
            write_score(storage, run, score)
            outcome = (score, False)
        if on_sample is not None:
            on_sample(*outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="judge") as pool:
        outcomes = list(pool.map(one, entries))
    created = datetime.now(UTC).isoformat(timespec="seconds")
    results = JudgeResults.of(run, options.model, created, [score for score, _ in outcomes])
    return Judged(results, write_results(storage, results), sum(1 for _, cached in outcomes if cached))


def reusable(previous: SampleScore | None, committed: CommittedAttempt | None, model: str) -> bool:
    """A cached score stands while it judged the same attempt with the same model and did not fail."""
    attempt = committed.attempt if committed is not None else None
    return previous is not None and previous.status != "failed" and previous.attempt == attempt and previous.judge_model == model


def judge_sample(
    storage: Storage, run: str, entry: ManifestEntry, committed: CommittedAttempt | None, client: openai.OpenAI, options: JudgeOptions, inputs: Inputs
) -> SampleScore:
    task = entry.task
    base: dict[str, Any] = dict(
        sample_id=entry.sample.sample_id,
        task_id=task.task_id,
        sector=task.sector,
        occupation=task.occupation,
        attempt=committed.attempt if committed else None,
        judge_model=options.model,
    )
    try:
        items = parse_rubric(task.rubric_json) if task.rubric_json else []
    except RubricError as exc:
        return SampleScore(**base, status="no_rubric", error=str(exc))
    if not items:
        return SampleScore(**base, status="no_rubric", error="the task has no rubric items")
    most = sum(item.points for item in items)
    result = _result(storage, run, entry.sample.sample_id, committed)
    if result is None or not result.ready:
        return SampleScore(**base, status="no_deliverable", max_points=most, error="no committed attempt" if result is None else "no answer or file")
    assert committed is not None
    root = layout.deliverables(run, entry.sample.sample_id, committed.attempt)
    with work_folder("judge") as tmp:
        files = [inputs.from_storage(f"{root}/{rel}", rel, Path(tmp) / "files") for rel in result.deliverable_files if rel in committed.present]
        views, _ = render(files)
        references, _ = render(inputs.references(entry, Path(tmp) / "references"))
    request = prompt.messages(task.prompt, result.deliverable_text, views, items, references)
    journal = Journal.of(storage, run, "rubric", options.model, entry.sample.sample_id)
    earlier = spent_on(journal.earlier())  # calls made for this sample before a kill: spent, never committed
    scores, tries, error, usage = ask(client, options, request, items, journal.record)
    usage = earlier + usage
    seen = {"views": [view.summary for view in views], "renderers": sorted({v.renderer for v in views + references if v.renderer})}
    if scores is None:
        return SampleScore(**base, status="failed", error=error, max_points=most, tries=tries, usage=usage, **seen)
    points = sum(s.score for s in scores)
    return SampleScore(**base, status="scored", items=scores, points=points, max_points=most, tries=tries, usage=usage, **seen)


def _result(storage: Storage, run: str, sample: str, committed: CommittedAttempt | None) -> SampleResult | None:
    if committed is None:
        return None
    try:
        return SampleResult.model_validate_json(storage.get_bytes(layout.result(run, sample, committed.attempt)))
    except (NotFound, ValidationError):
        return None


def ask(
    client: openai.OpenAI, options: JudgeOptions, request: list[dict[str, Any]], items: list[RubricItem], record: Callable[[Usage], None] = lambda _: None
) -> tuple[list[ItemScore] | None, int, str, Usage]:
    """The scores, the number of tries, the last error and what every try spent (see request.call)."""
    body = {"messages": request, "response_format": wire.response_format()}
    answer = call(client, options, body, lambda content: check_reply(content, items), record)
    return answer.parsed, answer.tries, answer.error, answer.usage

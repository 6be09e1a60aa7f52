"""Pairwise judging: each sample's deliverables against the experts' (the gold) or another run's, both orders.

Every call is cached under the digest of what it is asked (files by their bytes' digests), checked
before anything is rendered; each pair's verdict is written, atomically, as soon as both orders are
in, so a judge killed at any point resumes without judging a pair twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from pydantic import BaseModel, ValidationError

from gdpval.errors import GdpvalError
from gdpval.judge import prompt, wire
from gdpval.judge.convert import View
from gdpval.judge.gold import GoldIndex, ensure_gold
from gdpval.judge.inputs import Fetched, Inputs, render
from gdpval.judge.models import unfenced
from gdpval.judge.request import JudgeOptions, call
from gdpval.judge.spend import Journal, spent_on
from gdpval.judge.store import GOLD
from gdpval.judge.usage import Usage
from gdpval.judge.verdicts import Order, OrderReply, PageRef, PairResults, PairScore, agreement, combine, preference
from gdpval.judge.workdir import remove_left_behind, work_folder
from gdpval.manifest import ManifestEntry
from gdpval.records import load_run
from gdpval.sample import SampleResult
from gdpval.settings import MAX_INCONSISTENT
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.committed import CommittedAttempt, list_committed

PROMPT_VERSION = 1  # part of every call's digest: a new prompt never reuses old replies


@dataclass(frozen=True)
class PairOptions:
    judge: JudgeOptions
    against_run: str | None = None  # None: against the gold
    only_failed: bool = False
    seed: int = 0
    max_inconsistent: float = MAX_INCONSISTENT  # over this share of disagreeing orders the estimate is labelled unreliable

    @property
    def against(self) -> str:
        return GOLD if self.against_run is None else f"run-{self.against_run}"


@dataclass(frozen=True)
class JudgedPairs:
    results: PairResults
    uri: str
    reused: int


OnPair = Callable[[PairScore, bool], None]


class _Side:
    """One run's committed attempts and results, to read deliverables from."""

    def __init__(self, storage: Storage, run: str):
        self.run = run
        self.record, entries = load_run(storage, run)
        self.entries = {e.sample.sample_id: e for e in entries}
        self.attempts = list_committed(storage, run)

    def result(self, storage: Storage, sample: str) -> tuple[CommittedAttempt | None, SampleResult | None]:
        committed = self.attempts.get(sample)
        if committed is None:
            return None, None
        try:
            return committed, SampleResult.model_validate_json(storage.get_bytes(layout.result(self.run, sample, committed.attempt)))
        except (NotFound, ValidationError):
            return committed, None


def judge_pairs(storage: Storage, run: str, client: openai.OpenAI, options: PairOptions, inputs: Inputs, on_pair: OnPair | None = None) -> JudgedPairs:
    """Judge every sample whose verdict is not stored yet (or only failed ones), then write the results."""
    remove_left_behind()
    ours = _Side(storage, run)
    theirs = _Side(storage, options.against_run) if options.against_run else None
    entries = [e for sid, e in ours.entries.items() if theirs is None or sid in theirs.entries]
    if theirs is not None and not entries:
        raise GdpvalError(f"runs {run!r} and {options.against_run!r} have no sample in common: judge two runs of the same tasks")
    gold = None if theirs else ensure_gold(storage, run, ours.record.dataset, {e.task.task_id for e in entries}, inputs.dataset)
    stored = load_pairs(storage, run, options.against, options.judge.model)

    def one(entry: ManifestEntry) -> tuple[PairScore, bool] | None:
        sid = entry.sample.sample_id
        previous = stored.get(sid)
        committed = ours.attempts.get(sid)
        other = theirs.attempts.get(sid) if theirs else None
        if options.only_failed and (previous is None or previous.verdict != "failed"):
            outcome = (previous, True) if previous is not None else None
        elif previous is not None and _reusable(previous, committed, other, options.judge.model):
            outcome = (previous, True)
        else:
            score = judge_pair(storage, entry, ours, theirs, gold, client, options, inputs)
            write_pair(storage, run, score)
            outcome = (score, False)
        if outcome is not None and on_pair is not None:
            on_pair(*outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=options.judge.concurrency, thread_name_prefix="pairwise") as pool:
        outcomes = [o for o in pool.map(one, entries) if o is not None]
    created = datetime.now(UTC).isoformat(timespec="seconds")
    results = PairResults.of(run, options.against, options.judge.model, created, [s for s, _ in outcomes], options.seed, options.max_inconsistent)
    results.agreement = [agreement(results.samples, other) for other in other_judges(storage, run, options.against, options.judge.model)]
    text = results.model_dump_json(indent=2) + "\n"
    storage.put_text(layout.judge_model_results(run, options.against, options.judge.model), text)
    key = layout.judge_pair_results(run, options.against)
    storage.put_text(key, text)
    return JudgedPairs(results, storage.url(key), sum(1 for _, reused in outcomes if reused))


def _reusable(previous: PairScore, committed: CommittedAttempt | None, other: CommittedAttempt | None, model: str) -> bool:
    """A stored verdict stands while it judged the same attempts with the same model and did not fail."""
    same = previous.attempt == (committed.attempt if committed else None) and previous.other_attempt == (other.attempt if other else None)
    return previous.verdict != "failed" and same and previous.judge_model == model


def judge_pair(
    storage: Storage,
    entry: ManifestEntry,
    ours: _Side,
    theirs: _Side | None,
    gold: GoldIndex | None,
    client: openai.OpenAI,
    options: PairOptions,
    inputs: Inputs,
) -> PairScore:
    sid, task = entry.sample.sample_id, entry.task
    committed, result = ours.result(storage, sid)
    other_committed, other_result = theirs.result(storage, sid) if theirs else (None, None)
    base = PairScore(
        sample_id=sid,
        task_id=task.task_id,
        sector=task.sector,
        occupation=task.occupation,
        repeat=entry.sample.repeat,
        attempt=committed.attempt if committed else None,
        against=options.against,
        other_attempt=other_committed.attempt if other_committed else None,
        judge_model=options.judge.model,
        verdict="failed",
    )
    ours_ready = result is not None and result.ready
    if theirs is None:
        gold_files = gold.tasks.get(task.task_id, []) if gold else []
        if not gold_files or not all(f.key for f in gold_files):
            return base.model_copy(update={"error": "the dataset has no gold deliverable for this task (or lacks one of its files)"})
        theirs_ready = True
    else:
        theirs_ready = other_result is not None and other_result.ready
    if not ours_ready or not theirs_ready:
        verdict = "tie" if not ours_ready and not theirs_ready else ("loss" if not ours_ready else "win")
        return base.model_copy(update={"verdict": verdict, "no_deliverable": not ours_ready, "error": "no deliverable: graded without a judge call"})
    with work_folder("pairwise") as tmp:
        root = Path(tmp)
        references = inputs.references(entry, root / "references")
        assert result is not None and committed is not None
        our_files = _deliverables(inputs, ours.run, sid, committed, result, root / "ours")
        if theirs is None:
            assert gold is not None
            their_files = [inputs.from_storage(f.key, gold.name(f), root / "theirs") for f in gold.tasks[task.task_id]]
            their_answer = ""
        else:
            assert other_committed is not None and other_result is not None
            their_files = _deliverables(inputs, theirs.run, sid, other_committed, other_result, root / "theirs")
            their_answer = other_result.deliverable_text
        sides = {"ours": (_shown_answer(result.deliverable_text, our_files), our_files), "theirs": (_shown_answer(their_answer, their_files), their_files)}
        ours_pages = layout.judge_pages(ours.run, options.against)
        roots = {"ours": ours_pages, "theirs": layout.gold_pages(gold.dataset.key) if gold is not None and theirs is None else ours_pages}
        journal = Journal.of(storage, ours.run, f"pairwise-{options.against}", options.judge.model, sid)
        return _ask_both(storage, base, task.prompt, references, sides, roots, client, options, journal)


def _deliverables(inputs: Inputs, run: str, sample: str, committed: CommittedAttempt, result: SampleResult, into: Path) -> list[Fetched]:
    root = layout.deliverables(run, sample, committed.attempt)
    return [inputs.from_storage(f"{root}/{rel}", rel, into) for rel in result.deliverable_files if rel in committed.present]


def _shown_answer(answer: str, files: list[Fetched]) -> str:
    """The final answer text stands in for the deliverable only when there are no files (the gold has none)."""
    return "" if files else answer


Sides = dict[str, tuple[str, list[Fetched]]]


def _ask_both(
    storage: Storage,
    base: PairScore,
    task_prompt: str,
    references: list[Fetched],
    sides: Sides,
    roots: dict[str, str],
    client: openai.OpenAI,
    options: PairOptions,
    journal: Journal,
) -> PairScore:
    """Both orders, each from the call cache or the judge; views rendered only when a call is not cached. An order's
    usage counts what its calls for this pair spent, before a kill too (the journal); a reply cached by another pair is free."""
    orders: list[tuple[Order, str, str]] = [("ours-first", "ours", "theirs"), ("theirs-first", "theirs", "ours")]
    digests = {order: call_digest(options.judge.model, task_prompt, references, sides[a], sides[b]) for order, a, b in orders}
    earlier = journal.earlier()
    replies: dict[str, OrderReply] = {}
    for order, _, _ in orders:
        cached = read_call(storage, digests[order])
        if cached is not None:
            ours = spent_on(earlier, digests[order])
            replies[order] = cached.model_copy(update={"order": order, "cached": True, "usage": ours if ours.calls else Usage(cached_calls=1)})
    views: dict[str, list[View]] = {}
    reference_views: list[View] = []
    seconds = 0.0
    if len(replies) < len(orders):
        reference_views, seconds = render(references)
        for side, (_, files) in sides.items():
            views[side], spent = render(files)
            seconds += spent
        for order, a, b in orders:
            if order in replies:
                continue
            request = prompt.pairwise_messages(
                task_prompt, reference_views, prompt.Deliverable(sides[a][0], views[a]), prompt.Deliverable(sides[b][0], views[b])
            )
            reply = ask_pairwise(client, options, request, order, digests[order], journal.record)
            reply.usage += spent_on(earlier, digests[order])  # tries of this order before a kill (a malformed reply is not cached)
            if reply.preferred is not None:
                write_call(storage, reply)
            replies[order] = reply
    first, second = replies["ours-first"], replies["theirs-first"]
    summaries = [f"{side}: {v.summary}" for side, side_views in views.items() for v in side_views]
    pages = store_pages(storage, views, roots)
    renderers = sorted({v.renderer for shown in [reference_views, *views.values()] for v in shown if v.renderer})  # as the rubric judge's
    update: dict[str, Any] = {"replies": [first, second], "views": summaries, "pages": pages, "renderers": renderers, "convert_seconds": round(seconds, 3)}
    if first.preferred is None or second.preferred is None:
        return base.model_copy(update={**update, "error": first.error or second.error})
    verdict, inconsistent = combine(first.preferred, second.preferred)
    return base.model_copy(update={**update, "verdict": verdict, "inconsistent": inconsistent})


def store_pages(storage: Storage, views: dict[str, list[View]], roots: dict[str, str]) -> list[PageRef]:
    """The page images each side's views hold, kept under that side's root (the gold's stay judge-only)."""
    pages = []
    for side, side_views in views.items():
        for view in side_views:
            for index, png in enumerate(view.images):
                key = layout.page(roots[side], hashlib.sha256(png).hexdigest())
                if not storage.exists(key):
                    storage.put_bytes(key, png)
                pages.append(PageRef(side=side, file=view.name, index=index, key=key))
    return pages


def call_digest(model: str, task_prompt: str, references: list[Fetched], first: tuple[str, list[Fetched]], second: tuple[str, list[Fetched]]) -> str:
    """The identity of one call: the judge, the prompt version, the task, and every file by name and bytes' digest."""

    def files(fetched: list[Fetched]) -> list[list[str]]:
        return [[f.name, f.digest] for f in fetched]

    body = [PROMPT_VERSION, model, task_prompt, files(references), first[0], files(first[1]), second[0], files(second[1])]
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()


class _Reply(BaseModel):
    reason: str = ""
    better: str


Record = Callable[[Usage, str], None]


def ask_pairwise(
    client: openai.OpenAI, options: PairOptions, request: list[dict[str, Any]], order: Order, digest: str, record: Record = lambda *_: None
) -> OrderReply:
    """One order's call, retried on server errors and malformed replies (each answered try `record`ed at once); the last
    error when every try failed."""
    body = {"messages": request, "response_format": wire.pairwise_response_format()}
    answer = call(client, options.judge, body, _better, lambda spent: record(spent, digest))
    if answer.parsed is None:
        return OrderReply(order=order, error=answer.error, tries=answer.tries, digest=digest, usage=answer.usage)
    better, reason = answer.parsed
    return OrderReply(
        order=order, preferred=preference(better, order), reply=answer.content, reason=reason, tries=answer.tries, digest=digest, usage=answer.usage
    )


def _better(content: str | None) -> tuple[str, str]:
    """The reply's choice (A, B or tie) and its reason, squeezed to one line; a ValueError when it is neither."""
    try:
        parsed = _Reply.model_validate_json(unfenced(content or ""))
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None
    if parsed.better not in wire.CHOICES:
        raise ValueError(f"'better' is {parsed.better[:20]!r}, not A, B or tie")
    return parsed.better, " ".join(parsed.reason.split())[:1000]


def read_call(storage: Storage, digest: str) -> OrderReply | None:
    try:
        return OrderReply.model_validate_json(storage.get_bytes(layout.judge_call(digest)))
    except (NotFound, ValidationError):
        return None


def other_judges(storage: Storage, run: str, against: str, model: str) -> list[PairResults]:
    """The stored results of every other judge model of this run against `against`."""
    found = []
    root = layout.judge_models(run, against)
    for key in storage.list(root):
        if key.removeprefix(f"{root}/").count("/") != 1 or not key.endswith("/results.json"):
            continue
        try:
            results = PairResults.model_validate_json(storage.get_bytes(key))
        except (NotFound, ValidationError):
            continue
        if results.judge_model != model:
            found.append(results)
    return sorted(found, key=lambda r: r.judge_model)


def write_call(storage: Storage, reply: OrderReply) -> None:
    storage.put_text(layout.judge_call(reply.digest), reply.model_dump_json(indent=2))


def load_pairs(storage: Storage, run: str, against: str, model: str) -> dict[str, PairScore]:
    """Every verdict `model` stored so far, by sample id (those of the older, shared folder too);
    unreadable files are skipped (judged again)."""
    pairs: dict[str, PairScore] = {}
    for prefix in (layout.legacy_judge_pairs(run, against), f"{layout.judge_model_root(run, against, model)}/samples"):
        for key in storage.list(prefix):
            try:
                score = PairScore.model_validate_json(storage.get_bytes(key))
            except (NotFound, ValidationError):
                continue
            if score.judge_model == model:
                pairs[score.sample_id] = score
    return pairs


def write_pair(storage: Storage, run: str, score: PairScore) -> None:
    storage.put_text(layout.judge_pair(run, score.against, score.judge_model, score.sample_id), score.model_dump_json(indent=2) + "\n")

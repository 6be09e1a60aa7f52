"""What the judge reads (rubric items), what it must answer, and what it records per sample and per run."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from gdpval.errors import GdpvalError
from gdpval.judge.usage import Usage
from gdpval.sample import ModelText

LABEL = "local estimate by a judge model, not the official GDPval grade (OpenAI grades submissions)"
REASON_MAX = 300


class RubricError(GdpvalError):
    """A task's rubric_json cannot be read as rubric items."""


class MalformedReply(ValueError):
    """The judge model's reply is not the scores asked for; retried, then recorded as a judge failure."""


class RubricItem(BaseModel):
    item_id: str
    criterion: ModelText
    points: float = Field(ge=0)


class ItemScore(BaseModel):
    item_id: str
    criterion: ModelText
    points: float
    score: float
    reason: ModelText = ""


Status = Literal["scored", "failed", "no_deliverable", "no_rubric"]


class SampleScore(BaseModel):
    """One sample's judged scores: `points` of `max_points`, or a failure that leaves both out of the totals."""

    label: str = LABEL
    sample_id: str
    task_id: str
    sector: str
    occupation: str
    attempt: int | None = None
    judge_model: str
    status: Status
    error: ModelText = ""
    items: list[ItemScore] = Field(default_factory=list)
    points: float = 0.0
    max_points: float = 0.0
    tries: int = 0
    views: list[str] = Field(default_factory=list)  # what each deliverable file was turned into
    renderers: list[str] = Field(default_factory=list)  # what rendered the files the judge saw (deliverables and references), to reproduce a score
    usage: Usage = Field(default_factory=Usage)  # the judge's spend on this sample (none when read from the cache)

    @property
    def counted(self) -> bool:
        """Scored samples and samples with nothing to judge (0 points) count; failures and rubric-less tasks do not."""
        return self.status in ("scored", "no_deliverable")

    @property
    def fraction(self) -> float | None:
        return round(self.points / self.max_points, 4) if self.counted and self.max_points else None


class Totals(BaseModel):
    """Sum over max of the counted samples of a group (the run, or one sector)."""

    samples: int = 0
    scored: int = 0
    failed: int = 0
    no_deliverable: int = 0
    no_rubric: int = 0
    points: float = 0.0
    max_points: float = 0.0
    score: float | None = None

    @classmethod
    def of(cls, scores: list[SampleScore]) -> Totals:
        counted = [s for s in scores if s.counted]
        points, most = sum(s.points for s in counted), sum(s.max_points for s in counted)
        by = {status: sum(1 for s in scores if s.status == status) for status in ("scored", "failed", "no_deliverable", "no_rubric")}
        return cls(samples=len(scores), **by, points=points, max_points=most, score=round(points / most, 4) if most else None)


class JudgeResults(BaseModel):
    """runs/<run>/judge/results.json."""

    label: str = LABEL
    run_name: str
    judge_model: str
    created_at: str
    overall: Totals
    by_sector: dict[str, Totals]
    usage: Usage = Field(default_factory=Usage)  # the judge's spend over every sample's judging, apart from the agent's
    samples: list[SampleScore]

    @classmethod
    def of(cls, run_name: str, judge_model: str, created_at: str, scores: list[SampleScore]) -> JudgeResults:
        sectors = sorted({s.sector for s in scores})
        by_sector = {sector: Totals.of([s for s in scores if s.sector == sector]) for sector in sectors}
        usage = sum((s.usage for s in scores), Usage())
        return cls(
            run_name=run_name, judge_model=judge_model, created_at=created_at, overall=Totals.of(scores), by_sector=by_sector, usage=usage, samples=scores
        )


def parse_rubric(text: str) -> list[RubricItem]:
    """rubric_json as the current dataset revision has it: a JSON list of items with `score` and `criterion`."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise RubricError(f"rubric_json is not JSON ({exc})") from None
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise RubricError("rubric_json must be a JSON list of rubric items")
    items: list[RubricItem] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_id = str(item.get("rubric_item_id") or f"item-{index}")
        item_id = item_id if item_id not in seen else f"{item_id}#{index}"  # each item answered once, by its own id
        seen.add(item_id)
        try:
            items.append(RubricItem(item_id=item_id, criterion=str(item["criterion"]), points=item["score"]))
        except (KeyError, ValidationError) as exc:
            raise RubricError(f"rubric item {index} needs a criterion and a non-negative score ({exc.__class__.__name__})") from None
    return items


class _ReplyItem(BaseModel):
    item_id: str
    score: float
    reason: str = ""


class _Reply(BaseModel):
    scores: list[_ReplyItem]


def unfenced(text: str) -> str:
    """The JSON inside a Markdown code fence, which some OpenAI-compatible servers add despite the schema."""
    stripped = text.strip()
    if not stripped.startswith("```"):
        return stripped
    body = stripped.split("\n", 1)[1] if "\n" in stripped else ""
    return body.rsplit("```", 1)[0]


def check_reply(text: str | None, items: list[RubricItem]) -> list[ItemScore]:
    """The reply's scores in rubric order, each within 0..points, every item once; else MalformedReply."""
    try:
        reply = _Reply.model_validate_json(unfenced(text or ""))
    except ValidationError as exc:
        raise MalformedReply(f"the reply is not the JSON asked for: {exc.errors()[0]['msg']}") from None
    given = {}
    for entry in reply.scores:
        if entry.item_id in given:
            raise MalformedReply(f"item {entry.item_id!r} is scored twice")
        given[entry.item_id] = entry
    wanted = {item.item_id for item in items}
    if set(given) != wanted:
        missing, extra = sorted(wanted - set(given)), sorted(set(given) - wanted)
        raise MalformedReply(f"the reply's items do not match the rubric (missing {missing[:3]}, unknown {extra[:3]})")
    scores = []
    for item in items:
        entry = given[item.item_id]
        if not 0 <= entry.score <= item.points:
            raise MalformedReply(f"item {item.item_id!r} scored {entry.score}, outside 0..{item.points:g}")
        reason = " ".join(entry.reason.split())[:REASON_MAX]
        scores.append(ItemScore(item_id=item.item_id, criterion=item.criterion, points=item.points, score=entry.score, reason=reason))
    return scores

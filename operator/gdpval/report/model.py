"""The report of a run as typed figures, built from its records by pure functions (no I/O here).

Outcomes: `completed` ended with a final answer; `ready` left text or a file however it ended (the
benchmark's submission_ready); `failed` ended on an error; `missing` has no committed attempt.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from pydantic import BaseModel, Field

from gdpval.report.grading import Grading, grading
from gdpval.report.records import JudgeFigure, JudgeItem, RunRecords
from gdpval.sample import SampleResult
from gdpval.submission.readiness import asked_types

JUDGE_LABEL = "local estimate, not the official grade"


class Prices(BaseModel):
    """Prices per million tokens, for an estimated cost."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


class SampleRow(BaseModel):
    sample_id: str
    task_id: str
    sector: str
    occupation: str
    outcome: str  # completed, failed or missing
    ready: bool
    error_kind: str = ""
    error: str = ""
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None  # at the run's prices (budget.prices), when it had some
    duration_s: float = 0.0
    attempt: int = 0
    files: list[str] = Field(default_factory=list)
    asked: list[str] = Field(default_factory=list)  # file types the prompt asks for
    judge: float | None = None  # share of rubric points, a local estimate
    judge_items: list[JudgeItem] = Field(default_factory=list)

    @property
    def rank(self) -> float:
        """How good the outcome is, for win/loss/tie: the judge's share where judged, else the outcome."""
        if self.judge is not None:
            return self.judge
        return 2.0 if self.outcome == "completed" else 1.0 if self.ready else 0.0


class Group(BaseModel):
    """Figures of the samples of one sector or occupation (or the whole run)."""

    name: str
    samples: int = 0
    completed: int = 0
    ready: int = 0
    failed: int = 0
    missing: int = 0
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None  # summed over the samples with a recorded cost
    judged: int = 0
    judge_points: float = 0.0  # sum of shares of judged samples

    @property
    def ready_rate(self) -> float:
        return self.ready / self.samples if self.samples else 0.0

    @property
    def completed_rate(self) -> float:
        return self.completed / self.samples if self.samples else 0.0

    @property
    def judge_mean(self) -> float | None:
        return self.judge_points / self.judged if self.judged else None


class FileType(BaseModel):
    extension: str
    asked: int = 0  # samples whose prompt asks for it
    produced: int = 0  # samples that left at least one such file
    asked_and_produced: int = 0


class Headline(BaseModel):
    run_name: str
    model: str
    dataset: str
    revision: str
    total: Group
    failures: dict[str, int]  # reason -> samples
    wall_time_s: float
    sample_time_s: float
    cost: float | None = None
    cost_source: str = ""  # "from the prices given" (an estimate) or "at the run's prices" (recorded per sample)
    judge_score: float | None = None  # sum of points over sum of maxima, judged samples only
    judged: int = 0


class Report(BaseModel):
    headline: Headline
    grading: Grading = Field(default_factory=Grading)
    sectors: list[Group]
    occupations: list[Group]
    file_types: list[FileType]
    samples: list[SampleRow]


class SectorDelta(BaseModel):
    name: str
    this_ready: float
    other_ready: float
    this_completed: float
    other_completed: float
    ready: float  # this run's rate minus the other's
    completed: float
    judge: float | None = None
    tokens: int = 0


class TaskOutcome(BaseModel):
    task_id: str
    sector: str
    this: float
    other: float
    verdict: str  # win, loss or tie (for this run)


class Comparison(BaseModel):
    """This run against another on the tasks they share."""

    other: str
    other_model: str
    shared_tasks: int
    wins: int
    losses: int
    ties: int
    sectors: list[SectorDelta]
    tasks: list[TaskOutcome]


def extension(path: str) -> str:
    return PurePosixPath(path).suffix.lower().lstrip(".") or "(none)"


def sample_rows(records: RunRecords) -> list[SampleRow]:
    rows = []
    for entry in records.entries:
        sample = entry.sample.sample_id
        result = records.results.get(sample)
        score = records.scores.get(sample)
        asked = asked_types(entry.task.prompt, entry.task.reference_files)
        rows.append(_row(entry.task.task_id, sample, entry.task.sector, entry.task.occupation, asked, result, score))
    return rows


def _row(task_id: str, sample: str, sector: str, occupation: str, asked: list[str], result: SampleResult | None, score: JudgeFigure | None) -> SampleRow:
    base = SampleRow(sample_id=sample, task_id=task_id, sector=sector, occupation=occupation, outcome="missing", ready=False, asked=asked)
    if score is not None:
        base.judge = round(score.share, 4)
        base.judge_items = list(score.items)
    if result is None:
        return base
    return base.model_copy(
        update={
            "outcome": "completed" if result.completed else "failed",
            "ready": result.ready,
            "error_kind": result.error_kind.value if result.error_kind else "",
            "error": result.error,
            "steps": result.steps,
            "input_tokens": result.usage.input_tokens,
            "output_tokens": result.usage.output_tokens,
            "cost": result.cost,
            "duration_s": round(result.duration_s, 3),
            "attempt": result.attempt,
            "files": result.deliverable_files,
        }
    )


def group(name: str, rows: Iterable[SampleRow]) -> Group:
    g = Group(name=name)
    for row in rows:
        g.samples += 1
        g.completed += row.outcome == "completed"
        g.failed += row.outcome == "failed"
        g.missing += row.outcome == "missing"
        g.ready += row.ready
        g.steps += row.steps
        g.input_tokens += row.input_tokens
        g.output_tokens += row.output_tokens
        if row.cost is not None:
            g.cost = round((g.cost or 0.0) + row.cost, 6)
        if row.judge is not None:
            g.judged += 1
            g.judge_points += row.judge
    return g


def groups(rows: list[SampleRow], key: Callable[[SampleRow], str]) -> list[Group]:
    by: dict[str, list[SampleRow]] = defaultdict(list)
    for row in rows:
        by[key(row)].append(row)
    return [group(name, members) for name, members in sorted(by.items())]


def file_types(rows: list[SampleRow]) -> list[FileType]:
    asked = Counter(ext for row in rows for ext in set(row.asked))
    produced = Counter(ext for row in rows for ext in {extension(f) for f in row.files})
    both = Counter(ext for row in rows for ext in set(row.asked) & {extension(f) for f in row.files})
    return [FileType(extension=ext, asked=asked[ext], produced=produced[ext], asked_and_produced=both[ext]) for ext in sorted(asked | produced)]


def failures(rows: list[SampleRow]) -> dict[str, int]:
    """Samples that did not complete, by reason (`missing`: no committed attempt)."""
    reasons = Counter(row.error_kind or "unknown" if row.outcome == "failed" else "missing" for row in rows if row.outcome != "completed")
    return dict(sorted(reasons.items(), key=lambda item: (-item[1], item[0])))


def build_report(records: RunRecords, prices: Prices | None = None) -> Report:
    rows = sample_rows(records)
    total = group("all", rows)
    results = list(records.results.values())
    timed = [r for r in results if r.started_at > 0]  # a result written without a start (a crash) has no times
    wall = max((r.finished_at for r in timed), default=0.0) - min((r.started_at for r in timed), default=0.0)
    judged = [s for s in records.scores.values()]
    maxima = sum(s.max_score for s in judged)
    headline = Headline(
        run_name=records.record.run_name,
        model=records.record.settings.model.name,
        dataset=records.record.dataset.location,
        revision=records.record.dataset.revision,
        total=total,
        failures=failures(rows),
        wall_time_s=round(max(0.0, wall), 3),
        sample_time_s=round(sum(r.duration_s for r in results), 3),
        cost=round(prices.cost(total.input_tokens, total.output_tokens), 4) if prices else total.cost,
        cost_source="from the prices given" if prices else "at the run's prices" if total.cost is not None else "",
        judge_score=round(sum(s.score for s in judged) / maxima, 4) if maxima else None,
        judged=len(judged),
    )
    committed = {e.sample.sample_id: records.attempts.get(e.sample.sample_id) for e in records.entries}
    return Report(
        headline=headline,
        grading=grading(records.pairwise, records.pngs, records.check, committed),
        sectors=groups(rows, lambda r: r.sector),
        occupations=groups(rows, lambda r: r.occupation),
        file_types=file_types(rows),
        samples=rows,
    )


def _task_ranks(report: Report) -> dict[str, tuple[str, float]]:
    """Each task's sector and mean rank over its repeats."""
    by: dict[str, list[SampleRow]] = defaultdict(list)
    for row in report.samples:
        by[row.task_id].append(row)
    return {task: (rows[0].sector, sum(r.rank for r in rows) / len(rows)) for task, rows in by.items()}


def compare(this: Report, other: Report) -> Comparison:
    """Per-sector deltas over all samples, and per-task win/loss/tie over the tasks both runs have."""
    mine, theirs = _task_ranks(this), _task_ranks(other)
    tasks = []
    for task in sorted(mine.keys() & theirs.keys()):
        (sector, a), (_, b) = mine[task], theirs[task]
        verdict = "win" if a > b + 1e-9 else "loss" if b > a + 1e-9 else "tie"
        tasks.append(TaskOutcome(task_id=task, sector=sector, this=round(a, 4), other=round(b, 4), verdict=verdict))
    other_sectors = {g.name: g for g in other.sectors}
    deltas = []
    for g in this.sectors:
        o = other_sectors.get(g.name, Group(name=g.name))
        judge = None if g.judge_mean is None or o.judge_mean is None else round(g.judge_mean - o.judge_mean, 4)
        deltas.append(
            SectorDelta(
                name=g.name,
                this_ready=round(g.ready_rate, 4),
                other_ready=round(o.ready_rate, 4),
                this_completed=round(g.completed_rate, 4),
                other_completed=round(o.completed_rate, 4),
                ready=round(g.ready_rate - o.ready_rate, 4),
                completed=round(g.completed_rate - o.completed_rate, 4),
                judge=judge,
                tokens=(g.input_tokens + g.output_tokens) - (o.input_tokens + o.output_tokens),
            )
        )
    verdicts = Counter(t.verdict for t in tasks)
    return Comparison(
        other=other.headline.run_name,
        other_model=other.headline.model,
        shared_tasks=len(tasks),
        wins=verdicts["win"],
        losses=verdicts["loss"],
        ties=verdicts["tie"],
        sectors=deltas,
        tasks=tasks,
    )

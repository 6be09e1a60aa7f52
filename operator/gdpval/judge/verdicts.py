"""Pairwise verdicts: one sample's two orders made into win, tie, loss or failed, and the run's totals.

Pure: no I/O. A verdict counts only when both orders agree; disagreeing orders make a tie that is
also counted inconsistent. Failed pairs are left out of wins-or-ties (and counted), never losses.
The interval is a percentile bootstrap over tasks, a task's repeats resampled together, seeded.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Literal

from pydantic import BaseModel, Field

from gdpval.judge.usage import Usage
from gdpval.sample import ModelText
from gdpval.settings import MAX_INCONSISTENT

PAIRWISE_LABEL = "local estimate against the public gold, not OpenAI's grade"
Verdict = Literal["win", "tie", "loss", "failed"]
Preference = Literal["ours", "theirs", "tie"]  # which set a reply preferred: the judged run's, or the other
Order = Literal["ours-first", "theirs-first"]
RESAMPLES = 2000
LEVEL = 0.95
# A judge whose two orders disagree on more of the judged pairs than settings.MAX_INCONSISTENT prefers a position:
# its wins-or-ties is then mostly ties by rule, and is labelled so wherever it is shown.
UNRELIABLE = "position-biased: estimate unreliable"


class OrderReply(BaseModel):
    """One order's call: the preference read from the reply (None when the call failed), the reply itself, why."""

    order: Order
    preferred: Preference | None = None
    reply: ModelText = ""
    reason: ModelText = ""
    error: ModelText = ""
    tries: int = 0
    cached: bool = False
    digest: str = ""
    usage: Usage = Field(default_factory=Usage)


class PageRef(BaseModel):
    """One page image a pairwise judge was shown: whose set, which file, which page, and where it is kept."""

    side: Literal["ours", "theirs"]
    file: ModelText
    index: int
    key: str


class PairScore(BaseModel):
    """One sample judged against the other set (the gold, or another run's deliverables of the same task)."""

    label: str = PAIRWISE_LABEL
    sample_id: str
    task_id: str
    sector: str
    occupation: str
    repeat: int = 0
    attempt: int | None = None
    against: str  # "gold", or "run:<name>"
    other_attempt: int | None = None
    judge_model: str
    verdict: Verdict
    inconsistent: bool = False
    no_deliverable: bool = False  # the judged run made nothing: a loss, no call made
    error: ModelText = ""
    replies: list[OrderReply] = Field(default_factory=list)
    views: list[str] = Field(default_factory=list)
    pages: list[PageRef] = Field(default_factory=list)  # the images of `views`, stored (empty when every call was cached)
    renderers: list[str] = Field(default_factory=list)  # what rendered `views`: the local runtime, the pod sidecar's image, or the text-only host child
    convert_seconds: float = 0.0

    @property
    def usage(self) -> Usage:
        return sum((r.usage for r in self.replies), Usage())


def combine(first: Preference, second: Preference) -> tuple[Verdict, bool]:
    """Both orders' preferences into a verdict and whether the orders disagreed."""
    if first != second:
        return "tie", True
    return {"ours": "win", "theirs": "loss", "tie": "tie"}[first], False  # type: ignore[return-value]


def preference(choice: str, order: Order) -> Preference:
    """The reply's "A", "B" or "tie" as the judged run's or the other's, given which set was shown first."""
    if choice == "tie":
        return "tie"
    ours_first = order == "ours-first"
    return "ours" if (choice == "A") == ours_first else "theirs"


class Interval(BaseModel):
    low: float
    high: float
    level: float = LEVEL
    resamples: int = RESAMPLES
    seed: int = 0


class PairTotals(BaseModel):
    """Counts of a group of samples, and its wins-or-ties share with the bootstrap interval."""

    samples: int = 0
    wins: int = 0
    ties: int = 0
    losses: int = 0
    inconsistent: int = 0
    failed: int = 0
    no_deliverable: int = 0
    wins_or_ties: float | None = None
    interval: Interval | None = None
    inconsistent_rate: float | None = None  # over the pairs judged in both orders (not failed, not without deliverable)
    failed_rate: float | None = None  # over all samples
    reliability: str = ""  # UNRELIABLE when inconsistent_rate is over the run's limit

    @classmethod
    def of(cls, scores: list[PairScore], seed: int = 0, resamples: int = RESAMPLES, max_inconsistent: float = MAX_INCONSISTENT) -> PairTotals:
        counts = Counter(s.verdict for s in scores)
        counted = counts["win"] + counts["tie"] + counts["loss"]
        judged = counted - sum(1 for s in scores if s.no_deliverable)
        inconsistent = sum(1 for s in scores if s.inconsistent)
        rate = round(inconsistent / judged, 4) if judged else None
        return cls(
            samples=len(scores),
            wins=counts["win"],
            ties=counts["tie"],
            losses=counts["loss"],
            inconsistent=inconsistent,
            failed=counts["failed"],
            no_deliverable=sum(1 for s in scores if s.no_deliverable),
            wins_or_ties=round((counts["win"] + counts["tie"]) / counted, 4) if counted else None,
            interval=bootstrap(scores, seed, resamples),
            inconsistent_rate=rate,
            failed_rate=round(counts["failed"] / len(scores), 4) if scores else None,
            reliability=UNRELIABLE if rate is not None and rate > max_inconsistent else "",
        )


def _pct(value: float | None) -> str:
    return "none" if value is None else f"{value:.1%}"


def headline(totals: PairTotals, max_inconsistent: float = MAX_INCONSISTENT) -> str:
    """Wins-or-ties as every surface shows it: never without how often the orders disagreed and how many pairs
    failed, and labelled when the judge prefers a position."""
    interval = f" (95% interval {totals.interval.low:.1%}-{totals.interval.high:.1%})" if totals.interval else ""
    line = f"wins-or-ties {_pct(totals.wins_or_ties)}{interval}, orders disagreed on {_pct(totals.inconsistent_rate)}, failed {_pct(totals.failed_rate)}"
    if totals.reliability:
        line += f"; {totals.reliability} (the two orders disagreed on more than {max_inconsistent:.0%} of the judged pairs)"
    return line


def bootstrap(scores: list[PairScore], seed: int = 0, resamples: int = RESAMPLES) -> Interval | None:
    """Percentile interval of wins-or-ties: tasks drawn with replacement, each bringing all its counted repeats."""
    by_task: dict[str, list[int]] = defaultdict(list)
    for score in scores:
        if score.verdict != "failed":
            by_task[score.task_id].append(score.verdict in ("win", "tie"))
    if not by_task:
        return None
    groups = [(sum(v), len(v)) for _, v in sorted(by_task.items())]
    rng = random.Random(seed)
    shares = []
    for _ in range(resamples):
        drawn = [groups[rng.randrange(len(groups))] for _ in groups]
        shares.append(sum(good for good, _ in drawn) / sum(n for _, n in drawn))
    shares.sort()
    tail = round((1 - LEVEL) / 2 * resamples)
    low, high = shares[tail], shares[resamples - 1 - tail]
    return Interval(low=round(low, 4), high=round(high, 4), resamples=resamples, seed=seed)


class TaskConsistency(BaseModel):
    """A task's repeats: wins in k of n counted repeats, and how often the verdict changed from one repeat to the next."""

    task_id: str
    verdicts: list[Verdict]
    wins: int
    counted: int
    flip_rate: float | None


class Consistency(BaseModel):
    """Over tasks with two or more counted repeats: the mean flip rate and how many tasks won in k of n."""

    tasks: int = 0
    flip_rate: float | None = None
    wins_k_of_n: dict[str, int] = Field(default_factory=dict)
    per_task: list[TaskConsistency] = Field(default_factory=list)

    @classmethod
    def of(cls, scores: list[PairScore]) -> Consistency:
        by_task: dict[str, list[PairScore]] = defaultdict(list)
        for score in sorted(scores, key=lambda s: (s.task_id, s.repeat)):
            by_task[score.task_id].append(score)
        per_task = []
        for task_id, repeats in by_task.items():
            counted = [s.verdict for s in repeats if s.verdict != "failed"]
            if len(repeats) < 2:
                continue
            flips = sum(1 for a, b in zip(counted, counted[1:], strict=False) if a != b)
            rate = round(flips / (len(counted) - 1), 4) if len(counted) >= 2 else None
            per_task.append(
                TaskConsistency(task_id=task_id, verdicts=[s.verdict for s in repeats], wins=counted.count("win"), counted=len(counted), flip_rate=rate)
            )
        rates = [t.flip_rate for t in per_task if t.flip_rate is not None]
        k_of_n = Counter(f"{t.wins}/{t.counted}" for t in per_task if t.counted)
        return cls(
            tasks=len(per_task), flip_rate=round(sum(rates) / len(rates), 4) if rates else None, wins_k_of_n=dict(sorted(k_of_n.items())), per_task=per_task
        )


RANK = {"win": 0, "tie": 1, "loss": 2, "failed": 3}


def best_of_n(scores: list[PairScore]) -> dict[str, PairScore]:
    """Per task, the repeat the judge liked best (win over tie over loss; the first repeat on equal verdicts)."""
    best: dict[str, PairScore] = {}
    for score in sorted(scores, key=lambda s: (s.task_id, RANK[s.verdict], s.repeat)):
        best.setdefault(score.task_id, score)
    return best


# Agreement on pairwise preferences reported by the GDPval paper: its automated grader with the human
# experts, and the experts with one another. Ours is two judge models on the same pairs.
PAPER_AGREEMENT = {"grader-expert": 0.66, "expert-expert": 0.71}


class Agreement(BaseModel):
    """How often this judging's verdict (win, tie or loss) matched another judge model's on the same pairs."""

    judge_model: str
    pairs: int  # judged by both, on the same attempts, with a judge call (failed and no-deliverable pairs left out)
    agreed: int

    @property
    def rate(self) -> float | None:
        return self.agreed / self.pairs if self.pairs else None


def agreement(ours: list[PairScore], other: PairResults) -> Agreement:
    """Agreement of two judges sample by sample: only pairs both actually judged, on the same attempts, count."""
    theirs = {s.sample_id: s for s in other.samples}
    pairs = agreed = 0
    for score in ours:
        them = theirs.get(score.sample_id)
        if them is None or "failed" in (score.verdict, them.verdict) or score.no_deliverable or them.no_deliverable:
            continue
        if (score.attempt, score.other_attempt) != (them.attempt, them.other_attempt):
            continue
        pairs += 1
        agreed += score.verdict == them.verdict
    return Agreement(judge_model=other.judge_model, pairs=pairs, agreed=agreed)


class PairResults(BaseModel):
    """runs/<run>/judge/pairwise/<against>/results.json."""

    label: str = PAIRWISE_LABEL
    run_name: str
    against: str
    judge_model: str
    created_at: str
    overall: PairTotals
    by_sector: dict[str, PairTotals]
    by_occupation: dict[str, PairTotals]
    consistency: Consistency
    usage: Usage
    samples: list[PairScore]
    max_inconsistent: float = MAX_INCONSISTENT
    agreement: list[Agreement] = Field(default_factory=list)  # with every other judge model stored for this run

    @classmethod
    def of(
        cls, run_name: str, against: str, judge_model: str, created_at: str, scores: list[PairScore], seed: int = 0, max_inconsistent: float = MAX_INCONSISTENT
    ) -> PairResults:
        def groups(field: str) -> dict[str, PairTotals]:
            names = sorted({getattr(s, field) for s in scores})
            return {name: PairTotals.of([s for s in scores if getattr(s, field) == name], seed, max_inconsistent=max_inconsistent) for name in names}

        return cls(
            run_name=run_name,
            against=against,
            judge_model=judge_model,
            created_at=created_at,
            overall=PairTotals.of(scores, seed, max_inconsistent=max_inconsistent),
            by_sector=groups("sector"),
            by_occupation=groups("occupation"),
            consistency=Consistency.of(scores),
            usage=sum((s.usage for s in scores), Usage()),
            samples=scores,
            max_inconsistent=max_inconsistent,
        )

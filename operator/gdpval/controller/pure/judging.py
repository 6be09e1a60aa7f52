"""spec.judge on Kubernetes, the decision: after assembly a Job runs `gdpval judge`; its run-level
estimate goes into status.judge. A judge that fails (its Job gives up) never fails the run: the
submission is ready either way, and status.judge says what went wrong. The Job's manifest is
`manifests.judge_job`; its results are read by `effects.s3.read_estimate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdpval.api.v1alpha1 import GdpvalRunSpec, JudgeEstimate, PairwiseEstimate
from gdpval.controller.pure.observe import JobView
from gdpval.judge.models import LABEL
from gdpval.judge.verdicts import PAIRWISE_LABEL, Interval, PairTotals, headline


@dataclass(frozen=True)
class JudgeStep:
    """Where the judge stands once the submission is ready: `done` lets the run Succeed."""

    done: bool
    message: str = ""
    create: bool = False
    estimate: JudgeEstimate | None = None


def judge_step(spec: GdpvalRunSpec, job: JobView | None, estimate: JudgeEstimate | None) -> JudgeStep:
    if spec.judge is None:
        return JudgeStep(done=True)
    if job is None:
        return JudgeStep(done=False, message="creating the judge Job", create=True)
    if job.failed:
        failed = JudgeEstimate(state="Failed", message=f"the judge Job {job.name} failed: {job.message}"[:2048], label=LABEL)
        return JudgeStep(done=True, message=f"; {failed.message}", estimate=failed)
    if job.succeeded and estimate is not None:
        return JudgeStep(done=True, message=f"; {shown(estimate)}" if estimate.state == "Succeeded" else f"; {estimate.message}", estimate=estimate)
    return JudgeStep(done=False, message=f"the judge Job {job.name} judges the deliverables ({spec.judge.method})")


def shown(estimate: JudgeEstimate) -> str:
    """The estimate in a phrase: the rubric score, wins-or-ties with its interval, or both, and what they are."""
    parts = []
    if estimate.method != "pairwise":
        parts.append(
            f"judge estimate {estimate.score:.1%} ({estimate.label})" if estimate.score is not None else f"judge estimate: no score ({estimate.label})"
        )
    p = estimate.pairwise
    if p is not None:
        parts.append(f"{headline(_totals(p))} ({PAIRWISE_LABEL})")
    return "; ".join(parts)


def pairwise_estimate(totals: PairTotals, uri: str) -> PairwiseEstimate:
    """The pairwise results' overall totals as status.judge.pairwise."""
    low, high = (totals.interval.low, totals.interval.high) if totals.interval else (None, None)
    counts = totals.model_dump(
        include={"samples", "wins", "ties", "losses", "inconsistent", "failed", "wins_or_ties", "inconsistent_rate", "failed_rate", "reliability"}
    )
    return PairwiseEstimate(**counts, interval_low=low, interval_high=high, results_uri=uri)


def _totals(p: PairwiseEstimate) -> PairTotals:
    """status.judge.pairwise back as the judge's totals, for the one headline every surface prints."""
    interval = Interval(low=p.interval_low, high=p.interval_high) if p.interval_low is not None and p.interval_high is not None else None
    counts = p.model_dump(
        include={"samples", "wins", "ties", "losses", "inconsistent", "failed", "wins_or_ties", "inconsistent_rate", "failed_rate", "reliability"}
    )
    return PairTotals(**counts, interval=interval)

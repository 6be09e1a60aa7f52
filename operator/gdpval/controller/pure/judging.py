"""spec.judge on Kubernetes, the decision: after assembly a Job runs `gdpval judge`; its run-level
estimate goes into status.judge. A judge that fails (its Job gives up) never fails the run: the
submission is ready either way, and status.judge says what went wrong. The Job's manifest is
`manifests.judge_job`; its results are read by `effects.s3.read_estimate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gdpval.controller.pure.api import GdpvalRunSpec, JudgeEstimate
from gdpval.controller.pure.observe import JobView
from gdpval.judge.models import LABEL


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
        shown = f"{estimate.score:.1%}" if estimate.score is not None else "no score"
        return JudgeStep(
            done=True, message=f"; judge estimate {shown} ({estimate.label})" if estimate.state == "Succeeded" else f"; {estimate.message}", estimate=estimate
        )
    return JudgeStep(done=False, message=f"the judge Job {job.name} scores the deliverables against the rubrics")

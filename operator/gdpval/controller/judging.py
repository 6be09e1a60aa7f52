"""spec.judge on Kubernetes: after assembly a Job runs `gdpval judge`; its run-level estimate goes into status.judge.

A judge that fails (its Job gives up) never fails the run: the submission is ready either way, and
status.judge says what went wrong. Pure decisions here; gather and effects call in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gdpval.controller import manifests
from gdpval.controller import names as n
from gdpval.controller.api import GdpvalRunSpec, JudgeEstimate
from gdpval.controller.manifests import RunContext
from gdpval.controller.observe import JobView
from gdpval.judge import LABEL, load_results
from gdpval.storage import NotFound, Storage, layout


def judge_job(ctx: RunContext) -> dict[str, Any]:
    """`gdpval judge` over the run's output, the key (if any) from its Secret as OPENAI_API_KEY."""
    judge = ctx.spec.judge
    assert judge is not None, "a judge Job is only planned for a spec with a judge section"
    args = ["gdpval", "judge", *manifests._common_args(ctx), "--judge-model", judge.model, "--judge-base-url", judge.base_url]
    args += ["--concurrency", str(judge.concurrency), "--tries", str(judge.tries)]
    ref = judge.api_key_secret_ref
    env = [{"name": "OPENAI_API_KEY", "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}] if ref else []
    return manifests._job(ctx, n.COMPONENT_JUDGE, args, manifests.PREPARE_BACKOFF_LIMIT, env)


def read_estimate(storage: Storage, run: str) -> JudgeEstimate:
    """The run-level figures of the judge's results.json, or a failed estimate saying why it cannot be read."""
    try:
        results = load_results(storage, run)
    except (NotFound, ValidationError, ValueError) as exc:
        results, problem = None, f"{exc.__class__.__name__}: {exc}"[:500]
    else:
        problem = "no results.json"
    if results is None:
        return JudgeEstimate(state="Failed", message=f"the judge Job finished but its results are unreadable: {problem}", label=LABEL)
    total = results.overall
    uri = storage.url(layout.judge_results(run))
    return JudgeEstimate(
        state="Succeeded",
        score=total.score,
        points=total.points,
        max_points=total.max_points,
        scored=total.scored,
        failed=total.failed,
        results_uri=uri,
        message=f"judged by {results.judge_model}: {total.scored} scored, {total.failed} judge failures",
        label=results.label,
    )


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

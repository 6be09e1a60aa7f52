"""The run's lifecycle around its samples: the prepare Job, the assemble (and judge) Job, failing,
and the tidying of a finished run. Each phase returns its Verdict; `decide` concludes the pass once.
"""

from __future__ import annotations

from gdpval import contract
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide.suspend import queued, suspended_now
from gdpval.controller.pure.judging import judge_step
from gdpval.controller.pure.ledger import Outcome
from gdpval.controller.pure.observe import JobView, PodView
from gdpval.controller.pure.policy import keep_job, keep_pod, ttl_expires_at
from gdpval.controller.types import Observed, Plan, Verdict

_JOB_REASONS = {n.COMPONENT_PREPARE: ("Preparing", "PrepareFailed"), n.COMPONENT_ASSEMBLE: ("Assembling", "AssembleFailed")}


def prepare(obs: Observed, plan: Plan, can_start: bool) -> Verdict:
    job = obs.jobs.get(n.COMPONENT_PREPARE)
    if job is None and suspended_now(obs):
        return queued(obs, Verdict("Suspended", "Suspended", "suspended before the prepare Job started"))
    verdict = _job_missing_or_failed(obs, plan, job, n.COMPONENT_PREPARE, can_start)
    if verdict is not None or job is None:
        return verdict or Verdict("Preparing", "Preparing")
    if job.succeeded and obs.manifest_error:
        return Verdict("Preparing", "ManifestUnreadable", obs.manifest_error)
    return _job_pods_waiting(
        obs, plan, n.COMPONENT_PREPARE, Verdict("Preparing", "Preparing", f"the prepare Job {job.name} resolves the dataset and mirrors reference files")
    )


def assemble(obs: Observed, plan: Plan, can_start: bool) -> Verdict:
    job = obs.jobs.get(n.COMPONENT_ASSEMBLE)
    verdict = _job_missing_or_failed(obs, plan, job, n.COMPONENT_ASSEMBLE, can_start)
    if verdict is not None or job is None:
        return verdict or Verdict("Assembling", "Assembling")
    if job.succeeded and obs.submission is not None:
        step = judge_step(obs.spec, obs.jobs.get(n.COMPONENT_JUDGE), obs.judge)
        plan.judge = step.estimate
        if step.done:
            return Verdict("Succeeded", "SubmissionReady", f"submission at {obs.submission.uri}{step.message}")
        if step.create and can_start:
            plan.create_jobs.append(n.COMPONENT_JUDGE)
        return _job_pods_waiting(obs, plan, n.COMPONENT_JUDGE, Verdict("Judging", "Judging", step.message))
    if job.succeeded and obs.submission_error:
        return _job_pods_waiting(obs, plan, n.COMPONENT_ASSEMBLE, Verdict("Assembling", "SubmissionUnreadable", obs.submission_error))
    return _job_pods_waiting(obs, plan, n.COMPONENT_ASSEMBLE, Verdict("Assembling", "Assembling", f"the assemble Job {job.name} builds the submission"))


def _job_pods_waiting(obs: Observed, plan: Plan, component: str, verdict: Verdict) -> Verdict:
    """A Job whose pod cannot start says so in the conditions (the Job itself would only wait)."""
    waiting = [f"{p.name}: {p.waiting or p.unschedulable}" for p in obs.pods if p.component == component and not p.terminal and (p.waiting or p.unschedulable)]
    if not waiting:
        return verdict
    plan.waiting += waiting
    return verdict.but("PodsNotStarting", f"{verdict.message}; not starting: {'; '.join(waiting[:3])}")


def _job_missing_or_failed(obs: Observed, plan: Plan, job: JobView | None, component: str, can_start: bool) -> Verdict | None:
    """The Job's creation planned, or the run failed with the pod's own message; None if neither."""
    waiting_state, failed_reason = _JOB_REASONS[component]
    if job is None:
        if can_start:
            plan.create_jobs.append(component)
        return Verdict(waiting_state, waiting_state, f"creating the {component} Job")
    if not job.failed:
        return None
    pod = _job_failed_pod(obs, component)
    detail = (pod.message if pod else "") or job.message
    if pod and component == n.COMPONENT_PREPARE and pod.exit_code == contract.EXIT_RUN_CONFLICT:
        where = obs.storage_uri or obs.spec.output.url
        return Verdict("Failed", "StorageConflict", f"the run's storage {where} is not this run's: {detail.removeprefix('error: ')}")
    return Verdict("Failed", failed_reason, f"the {component} Job {job.name} failed: {detail}; see `kubectl logs job/{job.name}`")


def _job_failed_pod(obs: Observed, component: str) -> PodView | None:
    failed = [p for p in obs.pods if p.component == component and p.phase == "Failed"]
    return failed[-1] if failed else None


def stop(obs: Observed, plan: Plan) -> None:
    """A failed run stops spending: nothing new starts, live sample pods and running Jobs go."""
    plan.create_pods.clear()
    plan.create_jobs.clear()
    for pod in obs.pods:
        if pod.component == n.COMPONENT_SAMPLE and not pod.terminal:
            plan.delete(pod)
    _stop_jobs(obs, plan)


def _stop_jobs(obs: Observed, plan: Plan) -> None:
    for job in obs.jobs.values():
        if job.active and job.name not in plan.delete_jobs:
            plan.delete_jobs.append(job.name)


def cleanup_jobs(obs: Observed, plan: Plan) -> None:
    """After the run ends, Jobs follow the cleanup policy (their pods' logs go with them)."""
    for job in obs.jobs.values():
        if not keep_job(obs.spec, job) and job.name not in plan.delete_jobs:
            plan.delete_jobs.append(job.name)


def settled(obs: Observed, plan: Plan) -> Verdict:
    """A finished run only tidies up: stragglers deleted, its verdict kept as it was; it never creates.

    Its status was written before its last deletions, so a failed run may still have a Job running.
    """
    prev = obs.status
    reason = next((c.reason for c in prev.conditions if c.type == prev.state and c.status == "True"), prev.state)
    message = next((c.message for c in prev.conditions if c.type == prev.state), "")
    kept = Outcome.lost if prev.state == "Failed" else Outcome.succeeded
    for pod in obs.pods:
        if pod.component == n.COMPONENT_SAMPLE and (not pod.terminal or not keep_pod(obs.spec, kept)):
            plan.delete(pod)
    if prev.state == "Failed":
        _stop_jobs(obs, plan)
    cleanup_jobs(obs, plan)
    expires = ttl_expires_at(obs.spec, prev)
    if expires is not None and expires <= obs.now:
        plan.delete_run = True
    elif expires is not None:
        plan.wake_at.append(expires)
    return Verdict(prev.state, reason, message)

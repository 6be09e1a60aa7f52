"""Suspend and queue: spec.suspend and Kueue's admission hold a run the same way (Job-like).

A held run pauses its attempts in flight (pods deleted, attempts kept), suspends its Jobs and pauses
its deadline; a queued run's Workload is created once, given back after an eviction once nothing
runs, and finished at the end.
"""

from __future__ import annotations

from gdpval.controller.pure import names as n
from gdpval.controller.pure.ledger import Outcome
from gdpval.controller.pure.queue import hold_reason, must_release, must_resize
from gdpval.controller.types import (
    QUEUE_POLL_SECONDS,
    TERMINAL_STATES,
    WORKLOAD_CREATE,
    WORKLOAD_FINISH,
    WORKLOAD_RELEASE,
    WORKLOAD_RESIZE,
    Note,
    Observed,
    Plan,
    Verdict,
)


def held(obs: Observed) -> tuple[str, str] | None:
    """Why Kueue keeps a queued run from running now (reason, message), or None."""
    return hold_reason(obs.queueing, obs.workload) if obs.queueing else None


def suspended_now(obs: Observed) -> bool:
    """spec.suspend, or queued and not admitted: either way nothing runs and the deadline is paused."""
    return obs.spec.suspend or held(obs) is not None


def queued(obs: Observed, verdict: Verdict) -> Verdict:
    """A run Kueue holds (and not the user) says so in its reason and message."""
    why = None if obs.spec.suspend else held(obs)
    return verdict if why is None else verdict.but(why[0], f"{why[1]}; {verdict.message}")


def pause(obs: Observed, plan: Plan) -> None:
    """spec.suspend, as a Job's: every attempt in flight is paused and its live pod deleted; one whose pod
    waited ahead of its turn goes back to the queue instead (`queue_ahead`), so the run resumes within its window.

    A pod that already ended is left to `samples.record_pods` (its result is read as usual); whatever a
    stopped pod committed before it went is found by the probe made when the run resumes.
    """
    queue_ahead(obs, plan, "the run is suspended")
    sample_pods = [p for p in obs.pods if p.component == n.COMPONENT_SAMPLE]
    ended = {(p.sample, p.attempt) for p in sample_pods if p.terminal}
    live = {(p.sample, p.attempt): p for p in sample_pods if not p.terminal}
    for sample, entry in sorted(plan.ledger.items()):
        if entry.outcome != Outcome.running or (sample, entry.attempt) in ended:
            continue
        plan.ledger[sample] = entry.pause()
        pod = live.get((sample, entry.attempt))
        if pod is not None:
            plan.delete(pod)


def queue_ahead(obs: Observed, plan: Plan, why: str) -> None:
    """A held run keeps no pod waiting ahead of its turn (spec.samples.startAhead): each live one not given
    its go is deleted and its attempt queued, unspent, to start again in its turn; an Event says `why`."""
    gone = 0
    for pod in obs.pods:
        entry = plan.ledger.get(pod.sample)
        live = not (pod.terminal or pod.deleting or pod.name in plan.deleting)
        if pod.component != n.COMPONENT_SAMPLE or not (pod.ahead and live) or entry is None:
            continue
        if entry.outcome == Outcome.running and entry.attempt == pod.attempt:
            plan.ledger[pod.sample] = entry.queue()
            plan.delete(pod)
            gone += 1
    if gone:
        plan.notes.append(Note("PodsAheadDeleted", f"{gone} pod(s) started ahead deleted, their attempts queued unspent: {why}"))


def suspend_jobs(obs: Observed, plan: Plan, verdict: Verdict) -> Verdict:
    """spec.suspend reaches an unfinished Job as the Job's own suspend: its pod stops, and it goes on when unset."""
    want = suspended_now(obs)
    for job in obs.jobs.values():
        if not (job.succeeded or job.failed) and job.suspended != want:
            plan.suspend_jobs.append((job.name, want))
        if want and not (job.succeeded or job.failed) and verdict.state not in ("Running", "Suspended"):
            verdict = queued(obs, Verdict("Suspended", "Suspended", f"the {job.component} Job {job.name} is suspended"))
    return verdict


def workload_step(obs: Observed, plan: Plan, state: str) -> None:
    """The queued run's Workload: created once, resized while it waits for quota; its quota given back after an
    eviction once nothing runs, or at the end (Finished). Its status is read again soon: Kueue's decisions arrive
    by polling."""
    if obs.queueing is None:
        return
    view = obs.workload
    if view is None and not obs.blockers and state not in TERMINAL_STATES:
        plan.workload = WORKLOAD_CREATE
    elif view is not None and state in TERMINAL_STATES and not view.finished:
        plan.workload = WORKLOAD_FINISH
    elif must_release(view, _active(obs, plan)):
        plan.workload = WORKLOAD_RELEASE
    elif state not in TERMINAL_STATES and must_resize(obs.spec, view):
        plan.workload = WORKLOAD_RESIZE
    if state not in TERMINAL_STATES:
        plan.wake_at.append(obs.now + QUEUE_POLL_SECONDS)


def _active(obs: Observed, plan: Plan) -> bool:
    """Anything of the run still holds resources: a live sample pod, or a Job's pod not yet stopped."""
    pods = any(p.component == n.COMPONENT_SAMPLE and not p.terminal for p in obs.pods)
    return pods or bool(plan.create_pods) or any(j.active for j in obs.jobs.values())

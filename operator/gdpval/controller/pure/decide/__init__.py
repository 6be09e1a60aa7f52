"""The reconcile decision: observed state in, a plan of effects out. No I/O here.

Split by phase, each returning its Verdict: `lifecycle` (the prepare and assemble Jobs, failing,
a finished run), `samples` (pods, probes, counts, the window of pods, with `outage`: the model
endpoint's breaker over held attempts), `suspend` (spec.suspend and
Kueue's queueing). `decide` runs them in order and concludes the pass in one place.

Per-sample state lives in three places, each the authority for one thing:
- **pods** (label-selected index): attempts in flight; names are deterministic per attempt, so a
  create repeated after a crash hits the same pod (409) instead of starting a second one;
- **S3** `result.json`: the commit marker of a finished attempt (the agent writes it last);
- **the ledger ConfigMap**: the attempt in flight, written *before* its pod is created, and the
  outcome of each ended attempt, written *before* its pod is deleted.

Effects are applied in that order (ledger, then pod deletions, then creations), and every one is
idempotent; a terminal status is written before the deletions that end the run, and a pass that
reads a terminal status only deletes. A SIGKILL between any two of them leaves a state the next
pass reads correctly: a recorded pod still present is only deleted; an in-flight entry without a pod is checked against
S3 and a direct GET, then either resumed under the same attempt number (nothing was written; at
most `policy.MAX_RECREATIONS` times) or counted as lost (something was), never run twice beside a
live pod. A pod the cluster ended (preempted, evicted) before writing anything is resumed the same way. A new attempt starts only
after the previous one is recorded as ended, and never after a success.
"""

from __future__ import annotations

from gdpval.controller.pure.decide.lifecycle import assemble, cleanup_jobs, prepare, settled, stop
from gdpval.controller.pure.decide.samples import needed_probes, run_samples, spent, tally
from gdpval.controller.pure.decide.suspend import held, suspend_jobs, suspended_now, workload_step
from gdpval.controller.pure.policy import deadline_at
from gdpval.controller.types import TERMINAL_STATES, Observed, Plan, Verdict

__all__ = ["decide", "held", "needed_probes", "spent", "tally"]


def decide(obs: Observed) -> Plan:
    """One reconcile pass over one GdpvalRun."""
    plan = Plan(ledger=dict(obs.ledger))
    verdict = settled(obs, plan) if obs.status.state in TERMINAL_STATES else _active_run(obs, plan)
    workload_step(obs, plan, verdict.state)
    if obs.samples is not None and obs.status.state in TERMINAL_STATES:
        plan.tally = tally(obs.spec, obs.samples, plan.ledger, obs.sectors)
    plan.conclude(verdict)
    return plan


def _active_run(obs: Observed, plan: Plan) -> Verdict:
    can_start = not obs.blockers
    deadline = deadline_at(obs.spec, obs.status, obs.now)
    if deadline is not None and not suspended_now(obs):
        plan.wake_at.append(deadline)
    if obs.samples is None:
        verdict = prepare(obs, plan, can_start)
    else:
        verdict = run_samples(obs, plan, obs.samples, can_start) or assemble(obs, plan, can_start and not suspended_now(obs))
    if verdict.state not in TERMINAL_STATES and deadline is not None and obs.now >= deadline:
        verdict = Verdict("Failed", "DeadlineExceeded", f"the run exceeded spec.deadlineSeconds ({obs.spec.deadline_seconds}s)")
    if verdict.state == "Failed":
        stop(obs, plan)
    if verdict.state in TERMINAL_STATES:
        cleanup_jobs(obs, plan)
        return verdict
    return suspend_jobs(obs, plan, verdict)

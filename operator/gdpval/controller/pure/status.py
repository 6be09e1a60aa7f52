"""Status from a plan: bounded counts, conditions with stable reasons, and the Events of transitions.

`Ready` is True only once the submission exists (what kstatus/Flux and Argo CD wait for); its
reason otherwise names what the run waits on or what went wrong. `Finished` is True once the run
ended either way, so `kubectl wait --for=condition=Finished` returns on success and on failure.
"""

from __future__ import annotations

import hashlib
import json

from gdpval.api.v1alpha1 import Condition, GdpvalRunSpec, GdpvalRunStatus, Tokens
from gdpval.controller.pure.decide import held, spent
from gdpval.controller.pure.observe import iso
from gdpval.controller.pure.policy import suspended_since
from gdpval.controller.types import TERMINAL_STATES, Note, Observed, Plan
from gdpval.settings import PINNED_SECTIONS
from gdpval.storage import layout

PINNED = (*PINNED_SECTIONS, "output")
MAX_MESSAGE = 1024
SUSPENDED = "active sample pods are stopped and no new ones start; spec.deadlineSeconds is paused. Unset spec.suspend to resume"


def pinned_hash(spec: GdpvalRunSpec) -> str:
    """Short digests of the fields fixed at the start, per field so a refusal can name them."""
    parts = []
    for name in PINNED:
        value = getattr(spec, name).model_dump(mode="json", by_alias=True)
        parts.append(f"{name}={hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:10]}")
    return ",".join(parts)


def changed_pinned(previous: str | None, current: str) -> list[str]:
    if not previous:
        return []
    old = dict(p.split("=", 1) for p in previous.split(",") if "=" in p)
    new = dict(p.split("=", 1) for p in current.split(",") if "=" in p)
    return [f"spec.{k}" for k in PINNED if k in old and old.get(k) != new.get(k)]


def _cond(type_: str, ok: bool, reason: str, message: str = "") -> Condition:
    return Condition(type=type_, status="True" if ok else "False", reason=reason, message=message[:MAX_MESSAGE])


def _ready(obs: Observed, plan: Plan, refused: list[str]) -> Condition:
    if obs.blockers:
        b = obs.blockers[0]
        return _cond("Ready", False, b.reason, "; ".join(x.message for x in obs.blockers))
    if refused and plan.state not in TERMINAL_STATES:
        return _cond(
            "Ready",
            False,
            "SpecChangeRefused",
            f"{', '.join(refused)} changed after the run started; the run keeps its original settings (pinned in run.json). "
            "Revert the change, or create a new GdpvalRun to use the new settings",
        )
    if plan.state == "Succeeded":
        return _cond("Ready", True, "Succeeded", plan.message)
    return _cond("Ready", False, plan.reason or plan.state, plan.message)


def _running(obs: Observed, plan: Plan) -> Condition:
    if plan.state == "Running":
        waiting = f"; not starting: {'; '.join(plan.waiting[:3])}" if plan.waiting else ""
        return _cond("Running", True, plan.reason, plan.message + waiting)
    reasons = {"Suspended": "Suspended", "Preparing": "NotStarted", "Failed": "RunFailed"}
    return _cond("Running", False, reasons.get(plan.state, "SamplesFinished"), plan.message if plan.state == "Suspended" else "")


def _prepared(obs: Observed, plan: Plan) -> Condition:
    if obs.samples is not None:
        rev = f" at revision {obs.dataset_revision}" if obs.dataset_revision else ""
        return _cond("Prepared", True, "Prepared", f"{len(obs.samples)} samples from {obs.spec.dataset.id}{rev}")
    if plan.reason == "PrepareFailed":
        return _cond("Prepared", False, "PrepareFailed", plan.message)
    return _cond("Prepared", False, plan.reason if plan.state == "Preparing" else "NotStarted", plan.message)


def _suspended(obs: Observed, plan: Plan) -> Condition:
    """spec.suspend, or Kueue holding a queued run: either way no pod runs and the deadline is paused."""
    why = held(obs)
    if plan.state in TERMINAL_STATES or not (obs.spec.suspend or why):
        return _cond("Suspended", False, "NotSuspended")
    if obs.spec.suspend or why is None:
        return _cond("Suspended", True, "SuspendedByUser", SUSPENDED)
    return _cond("Suspended", True, *why)


def conditions(obs: Observed, plan: Plan, refused: list[str]) -> list[Condition]:
    failed = plan.state == "Failed"
    return [
        _ready(obs, plan, refused),
        _prepared(obs, plan),
        _running(obs, plan),
        _cond(
            "Succeeded",
            plan.state == "Succeeded",
            "SubmissionReady" if plan.state == "Succeeded" else ("RunFailed" if failed else "InProgress"),
            plan.message if plan.state == "Succeeded" else "",
        ),
        _cond("Failed", failed, plan.reason if failed else "NoFailure", plan.message if failed else ""),
        _cond(
            "Finished",
            plan.state in TERMINAL_STATES,
            (plan.reason or plan.state) if plan.state in TERMINAL_STATES else "InProgress",
            plan.message if plan.state in TERMINAL_STATES else "",
        ),
        _suspended(obs, plan),
        _cond("BudgetExhausted", bool(plan.budget), "RunBudgetSpent" if plan.budget else "WithinBudget", plan.budget),
        _cond("ModelUnavailable", bool(plan.outage), "EndpointOutage" if plan.outage else "EndpointAnswers", plan.outage),
        # kstatus (Flux, kubectl-style waiters) reads Stalled=True as "failed, will not progress".
        _cond("Stalled", failed, plan.reason if failed else "NotStalled", plan.message if failed else ""),
    ]


def merge_conditions(previous: list[Condition], new: list[Condition], now: float, generation: int) -> list[Condition]:
    """Keep lastTransitionTime unless the status flipped, so watchers see real transitions only."""
    old = {c.type: c for c in previous}
    merged = []
    for cond in new:
        before = old.get(cond.type)
        since = before.last_transition_time if before and before.status == cond.status and before.last_transition_time else iso(now)
        merged.append(cond.model_copy(update={"last_transition_time": since, "observed_generation": generation}))
    return merged


def build_status(obs: Observed, plan: Plan) -> GdpvalRunStatus:
    prev = obs.status
    current_hash = pinned_hash(obs.spec)
    refused = changed_pinned(prev.pinned_spec_hash, current_hash)
    state = "Blocked" if obs.blockers and plan.state not in TERMINAL_STATES else plan.state
    terminal = plan.state in TERMINAL_STATES
    t = plan.tally
    keep_counts = terminal and prev.state in TERMINAL_STATES
    counts = prev.samples if keep_counts else t.counts()
    cost = spent(obs.spec, t).cost if obs.spec.budget.prices.known else None
    tokens = prev.tokens if keep_counts else Tokens(input=t.input_tokens, output=t.output_tokens, cost=None if cost is None else round(cost, 6))
    submission = obs.submission if plan.state == "Succeeded" else None
    conds = merge_conditions(prev.conditions, conditions(obs, plan, refused), obs.now, obs.generation)
    return GdpvalRunStatus(
        observed_generation=obs.generation,
        state=state,
        progress=f"{counts.succeeded + counts.failed}/{counts.total}" if obs.samples is not None or keep_counts else "",
        samples=counts,
        tokens=tokens,
        model_api_errors=prev.model_api_errors if keep_counts else t.api_errors,
        start_time=prev.start_time or iso(obs.now),
        completion_time=(prev.completion_time or iso(obs.now)) if terminal else None,
        dataset_revision=obs.dataset_revision or prev.dataset_revision,
        storage_uri=obs.storage_uri or prev.storage_uri,
        submission_uri=submission.uri if submission else prev.submission_uri,
        report_uri=submission.report_uri if submission else prev.report_uri,
        submission_ready_rate=submission.ready_rate if submission else prev.submission_ready_rate,
        completed_rate=submission.completed_rate if submission else prev.completed_rate,
        grading_ready_rate=submission.grading_ready_rate if submission else prev.grading_ready_rate,
        grading_text_only=submission.grading_text_only if submission else prev.grading_text_only,
        started_ahead=0 if terminal else plan.started_ahead,
        pinned_spec_hash=prev.pinned_spec_hash or current_hash,
        judge=plan.judge or prev.judge,
        suspended_seconds=_suspended_seconds(prev, conds, obs.now),
        window=_window(plan, obs.spec.parallelism, prev.window),
        window_cut=iso(plan.window_cut) if plan.window_cut else prev.window_cut,
        sectors=prev.sectors if keep_counts or not t.sectors else t.sectors,
        conditions=conds,
    )


def _suspended_seconds(prev: GdpvalRunStatus, conds: list[Condition], now: float) -> int:
    """A suspension that just ended adds its length; one going on is counted from its condition (see policy.paused_seconds)."""
    since = suspended_since(prev)
    still = any(c.type == "Suspended" and c.status == "True" for c in conds)
    return prev.suspended_seconds + (int(now - since) if since is not None and not still else 0)


def legacy_storage(name: str, prev: GdpvalRunStatus) -> bool:
    """The run was started by an operator that kept its files under runs/<name>/: it stays there.

    Such a run has a status with a start time and either no storage URI or that folder's.
    """
    if prev.storage_uri:
        return prev.storage_uri.endswith(f"/{layout.run_root(name)}")
    return bool(prev.start_time)


def blocked_status(prev: GdpvalRunStatus, generation: int, reason: str, message: str, now: float) -> GdpvalRunStatus:
    """Only Ready changes: counts stay as last known while the run waits for a fix."""
    ready = _cond("Ready", False, reason, message)
    others = [c for c in prev.conditions if c.type != "Ready"]
    return prev.model_copy(
        update={
            "observed_generation": generation,
            "state": "Blocked",
            "conditions": merge_conditions(prev.conditions, [ready, *others], now, generation),
        }
    )


def settled_status(prev: GdpvalRunStatus, generation: int) -> GdpvalRunStatus:
    """A finished run's status never changes again, except to acknowledge a new generation."""
    conditions = [c.model_copy(update={"observed_generation": generation}) for c in prev.conditions]
    return prev.model_copy(update={"observed_generation": generation, "conditions": conditions})


def transition_notes(prev: GdpvalRunStatus, new: GdpvalRunStatus) -> list[Note]:
    """Events for state changes, so `kubectl describe` tells the run's story."""
    if prev.state == new.state:
        return []
    ready = next((c for c in new.conditions if c.type == "Ready"), None)
    message = ready.message if ready else ""
    if new.state == "Failed":
        failed = next((c for c in new.conditions if c.type == "Failed"), None)
        return [Note(failed.reason if failed else "Failed", failed.message if failed else "", warning=True)]
    if new.state == "Blocked":
        return [Note(ready.reason if ready else "Blocked", message, warning=True)]
    return [Note(new.state, message or f"the run is {new.state.lower()}")]


def status_patch(status: GdpvalRunStatus) -> dict:
    """The JSON written to the status subresource (camelCase, empty values dropped)."""
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _window(plan: Plan, parallelism: int, previous: int | None) -> int | None:
    """status.window: kept from the last pass that decided none; empty while it is all of parallelism,
    so that raising spec.parallelism widens it at once (a stored full window would stay at the old one)."""
    if not plan.window:
        return previous
    return plan.window if plan.window < parallelism else None

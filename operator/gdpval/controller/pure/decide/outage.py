"""The run's breaker on the model endpoint, on the cluster: held attempts, a probe pod, the resume.

A sample pod waits through an outage inside its own breaker (`agent.governor`) for a while, then
ends with `EXIT_MODEL_UNAVAILABLE`, committing nothing; `samples` records that attempt as `held`.
The ledger is the breaker's whole state, so it survives an operator restart:
- **open** while some attempt is held and no answer came after it: no new pod starts (retries
  neither), condition `ModelUnavailable`;
- **probe**: one held attempt at a time starts again (its reason stays `ModelUnavailable` while its
  pod runs), `PROBE_SECONDS` after the last hold; its pod probes the endpoint with backoff and either
  gets through or is held again;
- **closed** by an answer: a committed result (succeeded, or failed for the model's part) that ended
  at or after a hold frees that hold; every freed attempt starts again under its own number.
The operator never calls the model endpoint itself: sample pods are the only ones known to reach it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gdpval.controller.pure.ledger import MODEL_UNAVAILABLE, Entry, Ledger, Outcome
from gdpval.controller.pure.policy import MAX_CREATES_PER_PASS, OUTAGE_PROBE_SECONDS
from gdpval.controller.types import Plan
from gdpval.sample import OUTAGE_KINDS

_OUTAGE_REASONS = frozenset(str(kind) for kind in OUTAGE_KINDS)


def last_answer(ledger: Ledger) -> float | None:
    """When the endpoint last answered, as far as committed results tell: an attempt that ended
    succeeded or failed for a reason other than the endpoint's."""
    answered = [e.ended for e in ledger.values() if _answered(e)]
    return max(answered) if answered else None


def _answered(entry: Entry) -> bool:
    if entry.outcome == Outcome.succeeded:
        return True
    return entry.outcome == Outcome.failed and entry.reason not in _OUTAGE_REASONS


def _unanswered(entry: Entry, answer: float | None) -> bool:
    """A hold (or a probe's, whose entry keeps the hold's time) that no answer came after."""
    return answer is None or answer < entry.ended


def open_since(ledger: Ledger) -> float | None:
    """When the outage the breaker is open for began: its first hold (a probe's included) no answer came after."""
    answer = last_answer(ledger)
    holds = [e.ended for e in ledger.values() if (e.outcome == Outcome.held or _probing(e)) and _unanswered(e, answer)]
    return min(holds, default=None)


def _probing(entry: Entry) -> bool:
    return entry.outcome == Outcome.running and entry.reason == MODEL_UNAVAILABLE


def outage_step(now: float, plan: Plan, present: Iterable[tuple[str, int]]) -> str:
    """Resume the holds an answer freed, probe with one of the rest; why no new pod may start, or ""."""
    held = sorted(s for s, e in plan.ledger.items() if e.outcome == Outcome.held)
    probes = [e for e in plan.ledger.values() if _probing(e)]
    if not held and not probes:
        return ""  # the usual pass: no answer to look for
    pods = set(present)  # an attempt's next pod has its name: it waits for the last one to go
    answer = last_answer(plan.ledger)
    waiting: list[tuple[float, str]] = []
    for sample in held:
        entry = plan.ledger[sample]
        if _unanswered(entry, answer):
            waiting.append((entry.ended, sample))
        elif (sample, entry.attempt) not in pods:
            _resume(now, plan, sample, probe=False)
    probing = any(_unanswered(e, answer) for e in probes)
    if not waiting and not probing:
        return ""
    waiting.sort()
    if waiting and not probing:
        latest, first = waiting[-1][0], waiting[0][1]
        if now < latest + OUTAGE_PROBE_SECONDS:
            plan.wake_at.append(latest + OUTAGE_PROBE_SECONDS)
        elif (first, plan.ledger[first].attempt) not in pods:
            _resume(now, plan, first, probe=True)
    count = sum(1 for s in held if plan.ledger[s].outcome == Outcome.held)
    return f"the model endpoint is unavailable: {count} attempt(s) held (no attempt spent) and no new pods; a probe pod tries it again"


def _resume(now: float, plan: Plan, sample: str, probe: bool) -> None:
    """A held attempt starts again under its own number (bounded per pass like every creation); a
    probe keeps the reason `ModelUnavailable` while it runs, so the outage holds until it is heard from."""
    if len(plan.create_pods) >= MAX_CREATES_PER_PASS:
        plan.wake_at.append(now)
        return
    entry = plan.ledger[sample]
    plan.ledger[sample] = replace(entry.resume(), reason=MODEL_UNAVAILABLE if probe else "")
    plan.create_pods.append((sample, entry.attempt))

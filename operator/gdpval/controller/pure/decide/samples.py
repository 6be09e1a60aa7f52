"""The samples phase: fold pods and S3 probes into the ledger, count, and fill the window of pods.

A new attempt starts only after the previous one is recorded as ended, and never after a success;
an in-flight entry whose pod vanished is resumed under the same attempt (bounded) when nothing of
it reached S3, or counted as lost when something did.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.budget import Spend, run_limit_reached
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide.outage import open_since, outage_step
from gdpval.controller.pure.decide.suspend import pause, queue_ahead, queued, suspended_now
from gdpval.controller.pure.ledger import Entry, Ledger, Outcome, first_attempt
from gdpval.controller.pure.observe import PERMANENT_WAITING, PodView, parse_time
from gdpval.controller.pure.policy import (
    MAX_CREATES_PER_PASS,
    MAX_RECREATIONS,
    budget_allowed,
    create_retry_at,
    gave_up,
    keep_pod,
    may_recreate,
    next_window,
    retry_at,
)
from gdpval.controller.pure.queue import admitted_pods, over_quota
from gdpval.controller.types import Note, Observed, Plan, Tally, Verdict
from gdpval.sample import Tally as RunTally
from gdpval.sample import Usage

# In flight with no pod by design: a held attempt waits for the endpoint (`outage`), a queued one for its turn (`fill_window`).
_WITHOUT_POD = (Outcome.held, Outcome.queued)


def run_samples(obs: Observed, plan: Plan, samples: tuple[str, ...], can_start: bool) -> Verdict | None:
    """The run's verdict while samples are pending or running (or over the failure budget); None once all are done."""
    stopped = suspended_now(obs)
    record_pods(obs, plan)
    if stopped:
        pause(obs, plan)
    record_lost(obs, plan, stopped or not can_start)
    t = tally(obs.spec, samples, plan.ledger, obs.sectors)
    allowed = budget_allowed(obs.spec.failure_budget, t.total)
    if t.failed > allowed:
        plan.tally = t
        return Verdict("Failed", "FailureBudgetExceeded", f"{_failure_summary(t)} exceed the failure budget of {allowed} ({obs.spec.failure_budget})")
    if not (t.pending or t.running):
        plan.tally = t
        return None
    plan.budget = run_limit_reached(obs.spec.budget, spent(obs.spec, t)) or ""
    plan.window = next_window(obs.status.window or obs.spec.parallelism, obs.spec.parallelism, plan.limited, plan.clean)
    plan.window_cut = obs.now if plan.limited else 0.0
    if not stopped:
        plan.outage = outage_step(obs.now, plan, _present(obs))
        hold_ahead(obs, plan)
    if can_start and not stopped and not plan.budget and not plan.outage:
        fill_window(obs, plan, samples)
    plan.tally = tally(obs.spec, samples, plan.ledger, obs.sectors)
    _count_waiting(obs, plan)
    plan.network_policy = True  # egress of sample pods: by address with the network off, never to metadata services
    counts = f"{plan.tally.running} running, {plan.tally.pending} pending, {plan.tally.done}/{plan.tally.total} done"
    message = "; ".join(filter(None, (counts, over_quota(obs.spec, obs.queueing, obs.workload))))
    if stopped:
        return queued(obs, Verdict("Suspended", "Suspended", message))
    if plan.outage:
        return queued(obs, Verdict("Running", "ModelUnavailable", f"{message}; {plan.outage}"))
    if plan.budget:
        return queued(obs, Verdict("Running", "BudgetExhausted", f"{message}; no new pods: {plan.budget}; raise spec.budget to go on"))
    return queued(obs, Verdict("Running", "PodsNotStarting" if plan.waiting else "SamplesRunning", message))


def _is_current(entry: Entry | None, pod: PodView) -> bool:
    """The pod is the attempt the ledger has in flight (or one it has not heard of yet)."""
    if entry is None or pod.attempt > entry.attempt:
        return True
    return pod.attempt == entry.attempt and entry.outcome == Outcome.running


def sample_pods(obs: Observed) -> list[PodView]:
    return sorted((p for p in obs.pods if p.component == n.COMPONENT_SAMPLE), key=lambda p: (p.sample, p.attempt))


def needed_probes(obs: Observed) -> list[tuple[str, int]]:
    """Attempts whose outcome must be read from S3 before this pass can decide them, each once.

    An in-flight entry waiting out a refused create has no pod and nothing in S3 (it was probed
    before that create): probing it on every pass of the backoff would only cost calls. Nor is a
    paused one probed while the run stays suspended: it is, once, when the run resumes, and at
    most `MAX_CREATES_PER_PASS` of them a pass (each may become a pod).
    """
    wanted: list[tuple[str, int]] = []
    present = {(p.sample, p.attempt) for p in sample_pods(obs)}
    for pod in sample_pods(obs):
        if pod.terminal and _is_current(obs.ledger.get(pod.sample), pod):
            wanted.append((pod.sample, pod.attempt))
    resumed = 0
    stopped = suspended_now(obs)
    for sample, entry in sorted(obs.ledger.items()):
        paused = entry.outcome == Outcome.paused
        if (paused and (stopped or resumed >= MAX_CREATES_PER_PASS)) or entry.outcome in _WITHOUT_POD:
            continue
        if not entry.ended_attempt and (sample, entry.attempt) not in present and not _in_create_backoff(obs, sample):
            wanted.append((sample, entry.attempt))
            resumed += paused
    return list(dict.fromkeys(wanted))


def _stuck(spec: GdpvalRunSpec, pod: PodView, now: float) -> str:
    """Why a Pending pod is stuck, or "" while it may still start.

    A gated pod waits for admission (Kueue), which is the queue's business, not a fault; a
    scheduled pod's clock starts at scheduling, so a node from the autoscaler or a large image
    pull does not eat the time an unschedulable pod is given.
    """
    if pod.phase != "Pending" or pod.deleting:
        return ""
    if pod.waiting_reason in PERMANENT_WAITING:
        return pod.waiting_reason
    if pod.gated:
        return ""
    if now - pod.pending_since >= spec.samples.pending_timeout_seconds:
        return pod.waiting_reason or ("Unschedulable" if pod.unschedulable else "PendingTimeout")
    return ""


def record_pods(obs: Observed, plan: Plan) -> None:
    """Fold every sample pod into the ledger: adopt, finish, replace when stuck, clean up."""
    known = frozenset(obs.samples) if obs.samples is not None else None
    for pod in sample_pods(obs):
        entry = plan.ledger.get(pod.sample)
        if known is not None and pod.sample not in known:
            plan.delete(pod)
            continue
        if not _is_current(entry, pod):
            _settle_old_pod(obs, plan, pod, entry)
            continue
        if entry is None or pod.attempt > entry.attempt:
            entry = (entry or Entry(attempt=0, outcome=Outcome.lost, pods=0)).start(pod.attempt)
            plan.ledger[pod.sample] = entry
        if pod.terminal:
            _finish_pod(obs, plan, pod, entry)
        else:
            _watch_running_pod(obs, plan, pod, entry)


def _settle_old_pod(obs: Observed, plan: Plan, pod: PodView, entry: Entry | None) -> None:
    """An attempt the ledger already closed: a live one is a duplicate, a finished one is cleanup."""
    if not pod.terminal:
        plan.delete(pod)
        return
    outcome = entry.outcome if entry and entry.attempt == pod.attempt else Outcome.lost
    if outcome in _WITHOUT_POD or not keep_pod(obs.spec, outcome):  # the attempt's next pod has this one's name
        plan.delete(pod)


def _finish_pod(obs: Observed, plan: Plan, pod: PodView, entry: Entry) -> None:
    probe = obs.probes.get((pod.sample, pod.attempt))
    if probe is None:
        return
    if pod.disrupted and not probe.has_files:
        # The cluster ended it before it wrote anything: once this pod is gone, `record_lost`
        # re-creates the same attempt (bounded), so a preemption costs no attempt.
        plan.notes.append(Note("PodDisrupted", f"pod {pod.name} was ended by the cluster ({pod.failure or 'DisruptionTarget'}); it starts again", warning=True))
        plan.delete(pod)
        return
    if pod.model_unavailable and probe.committed is None and not probe.has_files:
        plan.ledger[pod.sample] = entry.hold(obs.now)
        plan.notes.append(Note("ModelUnavailable", f"pod {pod.name} ended by the model endpoint's outage; the attempt is held, not spent", warning=True))
        plan.delete(pod)
        return
    reason = pod.failure or ("NoResult" if pod.phase == "Succeeded" else "PodFailed")
    ended = _end(obs, plan, pod.sample, entry.finish(obs.now, probe.committed, reason))
    if probe.committed is not None:
        _count_rate_limits(obs, plan, pod, probe.committed.rate_limited)
    if ended.outcome == Outcome.lost:
        detail = f": {pod.message}" if pod.message else ""
        plan.notes.append(Note("AttemptFailed", f"pod {pod.name} ended without a result ({reason}){detail}", warning=True))
    if not keep_pod(obs.spec, ended.outcome):
        plan.delete(pod)


def _count_rate_limits(obs: Observed, plan: Plan, pod: PodView, rate_limited: int) -> None:
    """An ended attempt's word on the window: clean widens it; limited cuts it, unless its pod started
    before the last cut (it met the limit under the wider window, which that cut already answered)."""
    if not rate_limited:
        plan.clean += 1
    elif pod.created >= parse_time(obs.status.window_cut):
        plan.limited += 1


def _end(obs: Observed, plan: Plan, sample: str, ended: Entry) -> Entry:
    """Record an ended attempt; a sample out of retries gets an Event saying why."""
    plan.ledger[sample] = ended
    if gave_up(obs.spec, ended):
        plan.notes.append(Note("SampleFailed", f"sample {sample} failed after {ended.attempt} attempt(s): {ended.reason}", warning=True))
    return ended


def _watch_running_pod(obs: Observed, plan: Plan, pod: PodView, entry: Entry) -> None:
    why = _stuck(obs.spec, pod, obs.now)
    if why:
        # Still Pending: the agent never started, so no result can appear after this record.
        _end(obs, plan, pod.sample, entry.finish(obs.now, None, why))
        message = pod.waiting or pod.unschedulable or f"Pending for {int(obs.now - pod.pending_since)}s"
        plan.notes.append(Note("PodStuck", f"pod {pod.name} replaced: {message}", warning=True))
        plan.delete(pod)
        return
    if pod.phase == "Pending" and pod.gated:
        plan.waiting.append(f"{pod.name}: waiting for admission (scheduling gates: {pod.gated})")
    elif pod.phase == "Pending":
        plan.wake_at.append(pod.pending_since + obs.spec.samples.pending_timeout_seconds)
        if pod.waiting or pod.unschedulable:
            plan.waiting.append(f"{pod.name}: {pod.waiting or pod.unschedulable}")


def record_lost(obs: Observed, plan: Plan, suspended: bool) -> None:
    """In-flight entries whose pod is gone: committed, lost, or safe to start again (a paused one once the run resumes)."""
    present = _present(obs)
    for sample, entry in sorted(plan.ledger.items()):
        if entry.ended_attempt or (sample, entry.attempt) in present or (entry.outcome == Outcome.paused and suspended) or entry.outcome in _WITHOUT_POD:
            continue
        if _create_backoff(obs, plan, sample):
            continue
        probe = obs.probes.get((sample, entry.attempt))
        if probe is None and entry.outcome == Outcome.paused and not suspended:
            plan.wake_at.append(obs.now)  # left for the next pass by the per-pass bound
        if probe is None or probe.pod_exists:
            continue
        if probe.committed is not None or probe.has_files:
            _end(obs, plan, sample, entry.finish(obs.now, probe.committed, "PodLost"))
            if probe.committed is None:
                plan.notes.append(Note("AttemptLost", f"the pod of {sample} attempt {entry.attempt} disappeared mid-upload", warning=True))
            continue
        if suspended:
            continue
        if entry.outcome == Outcome.paused:
            plan.ledger[sample] = entry.resume()
            plan.create_pods.append((sample, entry.attempt))
            continue
        if not may_recreate(entry):
            _end(obs, plan, sample, entry.finish(obs.now, None, "PodLost"))
            message = f"the pod of {sample} attempt {entry.attempt} was lost again after {MAX_RECREATIONS} re-creations; the attempt counts as lost"
            plan.notes.append(Note("AttemptLost", message, warning=True))
            continue
        plan.ledger[sample] = entry.recreate()
        plan.create_pods.append((sample, entry.attempt))


def _present(obs: Observed) -> set[tuple[str, int]]:
    """(sample, attempt) of every sample pod, ended or being deleted included: a new pod of the same attempt must wait."""
    return {(p.sample, p.attempt) for p in obs.pods if p.component == n.COMPONENT_SAMPLE}


def _in_create_backoff(obs: Observed, sample: str) -> bool:
    return create_retry_at(obs.create_failures.get(sample), obs.now) is not None


def _create_backoff(obs: Observed, plan: Plan, sample: str) -> bool:
    """A pod the API refused is not asked for again until the retry delay is over."""
    refused = obs.create_failures.get(sample)
    ready = create_retry_at(refused, obs.now)
    if ready is None or refused is None:
        return False
    plan.wake_at.append(ready)
    plan.waiting.append(f"{sample}: pod creation failed: {refused[1]}")
    return True


def _where(spec: GdpvalRunSpec, entry: Entry | None) -> str:
    """pending, running, succeeded or failed: where a sample stands in the counts."""
    if entry is None:
        return "pending"
    if entry.outcome == Outcome.running:
        return "running"
    if entry.outcome == Outcome.succeeded:
        return "succeeded"
    return "failed" if gave_up(spec, entry) else "pending"


def tally(spec: GdpvalRunSpec, samples: tuple[str, ...], ledger: Ledger, sectors: Mapping[str, str] | None = None) -> Tally:
    """Counted in plain integers and made a model once: a pass counts every sample (10,000 or more)."""
    counts: Counter[str] = Counter()
    by_sector: dict[str, Counter[str]] = {}
    reasons: dict[str, int] = {}
    retried = input_tokens = output_tokens = api_errors = 0
    for sample in samples:
        entry = ledger.get(sample)
        where = _where(spec, entry)
        counts[where] += 1
        if sectors:
            by_sector.setdefault(sectors.get(sample, ""), Counter())[where] += 1
        if entry is None:
            continue
        retried += max(0, entry.pods - 1)
        input_tokens, output_tokens, api_errors = input_tokens + entry.input_tokens, output_tokens + entry.output_tokens, api_errors + entry.api_errors
        if where == "failed":
            reasons[entry.reason] = reasons.get(entry.reason, 0) + 1
    t = Tally(
        total=len(samples),
        **{k: counts[k] for k in ("pending", "running", "succeeded", "failed")},
        retried=retried,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        api_errors=api_errors,
        failure_reasons=reasons,
    )
    for sector, seen in by_sector.items():
        into = t.count_sector(sector)
        into.total, into.succeeded, into.failed = into.total + seen.total(), into.succeeded + seen["succeeded"], into.failed + seen["failed"]
    return t


def spent(spec: GdpvalRunSpec, t: RunTally) -> Spend:
    """The run's spend from the ledger's token counts (which know no cached tokens: all at the input price)."""
    spend = Spend()
    spend.add(Usage(input_tokens=t.input_tokens, output_tokens=t.output_tokens), spec.budget.prices)
    return spend


def hold_ahead(obs: Observed, plan: Plan) -> None:
    """Pods started ahead while no sample may start: at once when the budget is spent (only a raised
    spec.budget goes on), after the patience a running sample has for an outage
    (spec.samples.outageHoldSeconds from its first hold) when the model endpoint is down."""
    if plan.budget:
        queue_ahead(obs, plan, f"no new samples: {plan.budget}")
    elif plan.outage:
        until = (open_since(plan.ledger) or obs.now) + obs.spec.samples.outage_hold_seconds
        if obs.now >= until:
            queue_ahead(obs, plan, "the model endpoint is unavailable")
        elif any(pod.ahead for pod in sample_pods(obs)):
            plan.wake_at.append(until)


def fill_window(obs: Observed, plan: Plan, samples: tuple[str, ...]) -> None:
    """Fill the window up to `parallelism`: pods started ahead get their go first (`_started_ahead`), then pods are
    created for queued attempts (their pod ahead deleted while the run was held, `hold_ahead`) and retries whose
    backoff is over, then for new samples; after them up to `spec.samples.startAhead` pods for the next samples in
    the queue, which wait for their go. With startAhead every pod waits for its go, so a sample's clock starts at a
    pod whose agent is ready, and at most `parallelism` pods start at once: a run's first pods do not share the node
    with the pods ahead of them. At most `MAX_CREATES_PER_PASS` creates a pass."""
    waiting = _started_ahead(obs, plan, samples)
    in_flight = [(sample, e.attempt) for sample, e in plan.ledger.items() if e.outcome == Outcome.running]
    window, ahead = _bounds(obs, plan)
    room = window - (len(in_flight) - len(waiting))
    going = [pod for pod in waiting if pod.ready][: max(room, 0)]
    plan.go_pods.extend((pod.name, obs.now - pod.created) for pod in going)
    # The rest of the room waits for the pods ahead still starting (their Ready brings a pass): each is
    # nearer its first request than a pod created now would be.
    room -= len(waiting)
    # A pod the watch does not show yet counts both in the window and ahead: neither is overfilled.
    unseen = len(set(in_flight) - _present(obs)) if obs.spec.samples.start_ahead else 0
    beyond = max(ahead - (len(waiting) - len(going) + unseen), 0)
    starting = sum(not pod.ready for pod in waiting) + unseen + max(room, 0)
    wanted = max(room, 0) + min(beyond, max(window - starting, 0))
    slots = min(wanted, MAX_CREATES_PER_PASS - len(plan.create_pods))
    if slots < wanted:
        plan.wake_at.append(obs.now)  # the rest in the next pass
    again, retries, fresh = [], [], []
    present = _present(obs)
    for sample in samples:
        entry = plan.ledger.get(sample)
        ready = None if entry is None else retry_at(obs.spec, entry)
        if entry is None:
            fresh.append(sample)
        elif entry.outcome == Outcome.queued and (sample, entry.attempt) not in present:
            again.append(sample)
        elif ready is not None and ready <= obs.now:
            retries.append(sample)
        elif ready is not None:
            plan.wake_at.append(ready)
    for sample in again + retries + fresh:
        if slots <= 0:
            return
        if _create_backoff(obs, plan, sample):
            continue
        entry = plan.ledger.get(sample)
        started = first_attempt() if entry is None else entry.resume() if entry.outcome == Outcome.queued else entry.start(entry.attempt + 1)
        plan.ledger[sample] = started
        plan.create_pods.append((sample, started.attempt))
        if room <= 0 or obs.spec.samples.start_ahead:
            plan.ahead.add((sample, started.attempt))
        room -= 1
        slots -= 1


def _bounds(obs: Observed, plan: Plan) -> tuple[int, int]:
    """The window (within parallelism and the rate limits' cut) and the pods ahead of it, both within the sample pods
    Kueue admitted the run for: the window's pods come first."""
    window = min(obs.spec.parallelism, plan.window or obs.spec.parallelism)
    admitted = admitted_pods(obs.queueing, obs.workload)
    if admitted is None:
        return window, obs.spec.samples.start_ahead
    window = min(window, admitted)
    return window, max(min(obs.spec.samples.start_ahead, admitted - window), 0)


def _count_waiting(obs: Observed, plan: Plan) -> None:
    """Pods started ahead that still wait for their go call no model: the status counts them pending, not running."""
    went = {name for name, _ in plan.go_pods}
    waiting = sum(pod.name not in went for pod in _waiting_for_go(obs, plan)) + len(plan.ahead)
    plan.started_ahead = min(waiting, plan.tally.running)
    plan.tally.running -= plan.started_ahead
    plan.tally.pending += plan.started_ahead


def _waiting_for_go(obs: Observed, plan: Plan) -> list[PodView]:
    """Live pods of in-flight attempts still waiting for their go; only the Ready ones (their agent waits ready:
    manifests.ready_probe) may be given it."""
    waiting: list[PodView] = []
    for pod in sample_pods(obs):
        entry = plan.ledger.get(pod.sample)
        live = not (pod.terminal or pod.deleting or pod.name in plan.deleting)
        if pod.ahead and live and entry is not None and entry.outcome == Outcome.running and entry.attempt == pod.attempt:
            waiting.append(pod)
    return waiting


def _started_ahead(obs: Observed, plan: Plan, samples: tuple[str, ...]) -> list[PodView]:
    """The pods waiting for their go (`_waiting_for_go`) in queue order, the order their go comes in."""
    waiting = _waiting_for_go(obs, plan)
    if not waiting:
        return waiting
    order = {sample: i for i, sample in enumerate(samples)}
    return sorted(waiting, key=lambda pod: order.get(pod.sample, len(order)))


def _failure_summary(t: Tally) -> str:
    reasons = ", ".join(f"{count} {reason or 'unknown'}" for reason, count in sorted(t.failure_reasons.items(), key=lambda kv: -kv[1]))
    return f"{t.failed} failed samples ({reasons})" if reasons else f"{t.failed} failed samples"

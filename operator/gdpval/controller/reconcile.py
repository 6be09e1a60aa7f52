"""The reconcile decision: observed state in, a plan of effects out. No I/O here.

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

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import Field

from gdpval import contract
from gdpval.agent.budget import Spend, run_limit_reached
from gdpval.controller import names as n
from gdpval.controller.api import MAX_SECTORS, OTHER_SECTOR, GdpvalRunSpec, GdpvalRunStatus, JudgeEstimate, SectorCounts
from gdpval.controller.judging import judge_step
from gdpval.controller.ledger import Committed, Entry, Ledger, Outcome, first_attempt
from gdpval.controller.observe import PERMANENT_WAITING, JobView, PodView
from gdpval.controller.policy import (
    MAX_CREATES_PER_PASS,
    MAX_RECREATIONS,
    budget_allowed,
    create_retry_at,
    deadline_at,
    gave_up,
    keep_job,
    keep_pod,
    may_recreate,
    retry_at,
    ttl_expires_at,
)
from gdpval.controller.queue import Queueing, WorkloadView, hold_reason, must_release
from gdpval.sample import Tally as RunTally
from gdpval.sample import Usage

TERMINAL_STATES = ("Succeeded", "Failed")
RESYNC_SECONDS = 60.0
QUEUE_POLL_SECONDS = 5.0  # a queued run reads its Workload this often (no watch: the Kueue CRD may be absent)


@dataclass(frozen=True)
class Probe:
    """What S3 and a direct GET say about one attempt whose pod ended or vanished."""

    committed: Committed | None = None
    has_files: bool = False
    pod_exists: bool = False


@dataclass(frozen=True)
class Blocker:
    """A problem the CRD cannot catch (missing Secret, no image): nothing new starts until fixed."""

    reason: str
    message: str


@dataclass(frozen=True)
class Submission:
    uri: str
    ready_rate: float | None = None
    completed_rate: float | None = None
    report_uri: str | None = None  # the assemble Job writes the report after the packages; absent if that failed


@dataclass(frozen=True)
class Note:
    """An Event to post on the GdpvalRun."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Observed:
    now: float
    spec: GdpvalRunSpec
    generation: int
    status: GdpvalRunStatus
    ledger: Ledger
    pods: tuple[PodView, ...] = ()
    jobs: Mapping[str, JobView] = field(default_factory=dict)
    samples: tuple[str, ...] | None = None
    sectors: Mapping[str, str] = field(default_factory=dict)  # sample -> sector, from the manifest
    dataset_revision: str | None = None
    manifest_error: str = ""
    storage_uri: str = ""  # the run's folder in its output, once the storage was opened
    blockers: tuple[Blocker, ...] = ()
    probes: Mapping[tuple[str, int], Probe] = field(default_factory=dict)
    create_failures: Mapping[str, tuple[float, str]] = field(default_factory=dict)
    submission: Submission | None = None
    submission_error: str = ""
    judge: JudgeEstimate | None = None  # read once the judge Job succeeded
    queueing: Queueing | None = None  # the run's Kueue labels: one Workload queues the whole run
    workload: WorkloadView | None = None  # read in each pass of a queued run; None before it exists


class Tally(RunTally):
    """A pass's counts, plus why the samples that gave up failed (for the failure-budget message)."""

    failure_reasons: dict[str, int] = Field(default_factory=dict)
    sectors: dict[str, SectorCounts] = Field(default_factory=dict)

    def count_sector(self, sector: str) -> SectorCounts:
        """The sector's counts, created on first use; past `MAX_SECTORS` names they share one entry."""
        if sector not in self.sectors and len(self.sectors) >= MAX_SECTORS:
            sector = OTHER_SECTOR
        return self.sectors.setdefault(sector, SectorCounts())


@dataclass
class Plan:
    ledger: Ledger
    state: str = ""
    reason: str = ""
    message: str = ""
    create_pods: list[tuple[str, int]] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    deleting: set[str] = field(default_factory=set, repr=False)  # delete_pods as a set: one check per pod, not a scan
    create_jobs: list[str] = field(default_factory=list)
    delete_jobs: list[str] = field(default_factory=list)
    suspend_jobs: list[tuple[str, bool]] = field(default_factory=list)  # (Job, its spec.suspend) to set
    network_policy: bool = False
    delete_run: bool = False  # the finished run's ttlSecondsAfterFinished is over
    notes: list[Note] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # pods not starting, for the Running condition
    budget: str = ""  # why spec.budget allows no new pod (the BudgetExhausted condition), or ""
    tally: Tally = field(default_factory=Tally)
    wake_at: list[float] = field(default_factory=list)
    judge: JudgeEstimate | None = None  # for status.judge
    workload: str = ""  # WORKLOAD_CREATE, WORKLOAD_RELEASE or WORKLOAD_FINISH: the queued run's Workload write

    def requeue_after(self, now: float) -> float:
        soonest = min([t - now for t in self.wake_at] + [RESYNC_SECONDS])
        return max(1.0, soonest)


WORKLOAD_CREATE, WORKLOAD_RELEASE, WORKLOAD_FINISH = "create", "release", "finish"


def held(obs: Observed) -> tuple[str, str] | None:
    """Why Kueue keeps a queued run from running now (reason, message), or None."""
    return hold_reason(obs.queueing, obs.workload) if obs.queueing else None


def suspended_now(obs: Observed) -> bool:
    """spec.suspend, or queued and not admitted: either way nothing runs and the deadline is paused."""
    return obs.spec.suspend or held(obs) is not None


def _is_current(entry: Entry | None, pod: PodView) -> bool:
    """The pod is the attempt the ledger has in flight (or one it has not heard of yet)."""
    if entry is None or pod.attempt > entry.attempt:
        return True
    return pod.attempt == entry.attempt and entry.outcome == Outcome.running


def _sample_pods(obs: Observed) -> list[PodView]:
    return sorted((p for p in obs.pods if p.component == n.COMPONENT_SAMPLE), key=lambda p: (p.sample, p.attempt))


def needed_probes(obs: Observed) -> list[tuple[str, int]]:
    """Attempts whose outcome must be read from S3 before this pass can decide them, each once.

    An in-flight entry waiting out a refused create has no pod and nothing in S3 (it was probed
    before that create): probing it on every pass of the backoff would only cost calls. Nor is a
    paused one probed while the run stays suspended: it is, once, when the run resumes, and at
    most `MAX_CREATES_PER_PASS` of them a pass (each may become a pod).
    """
    wanted: list[tuple[str, int]] = []
    present = {(p.sample, p.attempt) for p in _sample_pods(obs)}
    for pod in _sample_pods(obs):
        if pod.terminal and _is_current(obs.ledger.get(pod.sample), pod):
            wanted.append((pod.sample, pod.attempt))
    resumed = 0
    stopped = suspended_now(obs)
    for sample, entry in sorted(obs.ledger.items()):
        paused = entry.outcome == Outcome.paused
        if paused and (stopped or resumed >= MAX_CREATES_PER_PASS):
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


def _record_pods(obs: Observed, plan: Plan) -> None:
    """Fold every sample pod into the ledger: adopt, finish, replace when stuck, clean up."""
    known = frozenset(obs.samples) if obs.samples is not None else None
    for pod in _sample_pods(obs):
        entry = plan.ledger.get(pod.sample)
        if known is not None and pod.sample not in known:
            _delete(plan, pod)
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


def _delete(plan: Plan, pod: PodView) -> None:
    if not pod.deleting and pod.name not in plan.deleting:
        plan.deleting.add(pod.name)
        plan.delete_pods.append(pod.name)


def _settle_old_pod(obs: Observed, plan: Plan, pod: PodView, entry: Entry | None) -> None:
    """An attempt the ledger already closed: a live one is a duplicate, a finished one is cleanup."""
    if not pod.terminal:
        _delete(plan, pod)
        return
    outcome = entry.outcome if entry and entry.attempt == pod.attempt else Outcome.lost
    if not keep_pod(obs.spec, outcome):
        _delete(plan, pod)


def _finish_pod(obs: Observed, plan: Plan, pod: PodView, entry: Entry) -> None:
    probe = obs.probes.get((pod.sample, pod.attempt))
    if probe is None:
        return
    if pod.disrupted and not probe.has_files:
        # The cluster ended it before it wrote anything: once this pod is gone, `_record_lost`
        # re-creates the same attempt (bounded), so a preemption costs no attempt.
        plan.notes.append(Note("PodDisrupted", f"pod {pod.name} was ended by the cluster ({pod.failure or 'DisruptionTarget'}); it starts again", warning=True))
        _delete(plan, pod)
        return
    reason = pod.failure or ("NoResult" if pod.phase == "Succeeded" else "PodFailed")
    ended = _end(obs, plan, pod.sample, entry.finish(obs.now, probe.committed, reason))
    if ended.outcome == Outcome.lost:
        detail = f": {pod.message}" if pod.message else ""
        plan.notes.append(Note("AttemptFailed", f"pod {pod.name} ended without a result ({reason}){detail}", warning=True))
    if not keep_pod(obs.spec, ended.outcome):
        _delete(plan, pod)


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
        _delete(plan, pod)
        return
    if pod.phase == "Pending" and pod.gated:
        plan.waiting.append(f"{pod.name}: waiting for admission (scheduling gates: {pod.gated})")
    elif pod.phase == "Pending":
        plan.wake_at.append(pod.pending_since + obs.spec.samples.pending_timeout_seconds)
        if pod.waiting or pod.unschedulable:
            plan.waiting.append(f"{pod.name}: {pod.waiting or pod.unschedulable}")


def _pause(obs: Observed, plan: Plan) -> None:
    """spec.suspend, as a Job's: every attempt in flight is paused and its live pod deleted.

    A pod that already ended is left to `_record_pods` (its result is read as usual); whatever a
    stopped pod committed before it went is found by the probe made when the run resumes.
    """
    ended = {(p.sample, p.attempt) for p in _sample_pods(obs) if p.terminal}
    live = {(p.sample, p.attempt): p for p in _sample_pods(obs) if not p.terminal}
    for sample, entry in sorted(plan.ledger.items()):
        if entry.outcome != Outcome.running or (sample, entry.attempt) in ended:
            continue
        plan.ledger[sample] = entry.pause()
        pod = live.get((sample, entry.attempt))
        if pod is not None:
            _delete(plan, pod)


def _record_lost(obs: Observed, plan: Plan, suspended: bool) -> None:
    """In-flight entries whose pod is gone: committed, lost, or safe to start again (a paused one once the run resumes)."""
    present = {(p.sample, p.attempt) for p in obs.pods if p.component == n.COMPONENT_SAMPLE}
    for sample, entry in sorted(plan.ledger.items()):
        if entry.ended_attempt or (sample, entry.attempt) in present or (entry.outcome == Outcome.paused and suspended):
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
    usage = Usage(input_tokens=t.input_tokens, output_tokens=t.output_tokens)
    spend = Spend()
    spend.add(usage, spec.budget.prices)
    return spend


def _fill_window(obs: Observed, plan: Plan, samples: tuple[str, ...]) -> None:
    """Start pods up to `parallelism`, at most `MAX_CREATES_PER_PASS` in one pass: retries whose backoff is over first, then new samples."""
    active = sum(1 for e in plan.ledger.values() if e.outcome == Outcome.running)
    room = obs.spec.parallelism - active
    slots = min(room, MAX_CREATES_PER_PASS - len(plan.create_pods))
    if slots < room:
        plan.wake_at.append(obs.now)  # the rest of the window in the next pass
    retries, fresh = [], []
    for sample in samples:
        entry = plan.ledger.get(sample)
        ready = None if entry is None else retry_at(obs.spec, entry)
        if entry is None:
            fresh.append(sample)
        elif ready is not None and ready <= obs.now:
            retries.append(sample)
        elif ready is not None:
            plan.wake_at.append(ready)
    for sample in retries + fresh:
        if slots <= 0:
            return
        if _create_backoff(obs, plan, sample):
            continue
        entry = plan.ledger.get(sample)
        started = first_attempt() if entry is None else entry.start(entry.attempt + 1)
        plan.ledger[sample] = started
        plan.create_pods.append((sample, started.attempt))
        slots -= 1


def _fail(obs: Observed, plan: Plan, reason: str, message: str) -> None:
    """Stop spending: live sample pods and running Jobs go; finished ones follow the cleanup policy."""
    plan.state, plan.reason, plan.message = "Failed", reason, message
    plan.create_pods.clear()
    plan.create_jobs.clear()
    for pod in obs.pods:
        if pod.component == n.COMPONENT_SAMPLE and not pod.terminal:
            _delete(plan, pod)
    _stop_jobs(obs, plan)


def _stop_jobs(obs: Observed, plan: Plan) -> None:
    for job in obs.jobs.values():
        if job.active and job.name not in plan.delete_jobs:
            plan.delete_jobs.append(job.name)


def _prepare(obs: Observed, plan: Plan, can_start: bool) -> None:
    job = obs.jobs.get(n.COMPONENT_PREPARE)
    plan.state = "Preparing"
    if job is None and suspended_now(obs):
        plan.state, plan.reason, plan.message = "Suspended", "Suspended", "suspended before the prepare Job started"
        _queue_reason(obs, plan)
        return
    if _job_missing_or_failed(obs, plan, job, n.COMPONENT_PREPARE, can_start) or job is None:
        return
    if job.succeeded and obs.manifest_error:
        plan.reason, plan.message = "ManifestUnreadable", obs.manifest_error
        return
    plan.reason, plan.message = "Preparing", f"the prepare Job {job.name} resolves the dataset and mirrors reference files"
    _job_pods_waiting(obs, plan, n.COMPONENT_PREPARE)


def _job_pods_waiting(obs: Observed, plan: Plan, component: str) -> None:
    """A Job whose pod cannot start says so in the conditions (the Job itself would only wait)."""
    waiting = [f"{p.name}: {p.waiting or p.unschedulable}" for p in obs.pods if p.component == component and not p.terminal and (p.waiting or p.unschedulable)]
    if waiting:
        plan.waiting += waiting
        plan.reason = "PodsNotStarting"
        plan.message += f"; not starting: {'; '.join(waiting[:3])}"


_JOB_REASONS = {n.COMPONENT_PREPARE: ("Preparing", "PrepareFailed"), n.COMPONENT_ASSEMBLE: ("Assembling", "AssembleFailed")}


def _job_missing_or_failed(obs: Observed, plan: Plan, job: JobView | None, component: str, can_start: bool) -> bool:
    """Plan the Job's creation, or the run's failure with the pod's own message; True if either."""
    waiting_reason, failed_reason = _JOB_REASONS[component]
    if job is None:
        plan.reason, plan.message = waiting_reason, f"creating the {component} Job"
        if can_start:
            plan.create_jobs.append(component)
        return True
    if job.failed:
        pod = _job_failed_pod(obs, component)
        detail = (pod.message if pod else "") or job.message
        if pod and component == n.COMPONENT_PREPARE and pod.exit_code == contract.EXIT_RUN_CONFLICT:
            _fail(
                obs, plan, "StorageConflict", f"the run's storage {obs.storage_uri or obs.spec.output.url} is not this run's: {detail.removeprefix('error: ')}"
            )
            return True
        _fail(obs, plan, failed_reason, f"the {component} Job {job.name} failed: {detail}; see `kubectl logs job/{job.name}`")
        return True
    return False


def _job_failed_pod(obs: Observed, component: str) -> PodView | None:
    failed = [p for p in obs.pods if p.component == component and p.phase == "Failed"]
    return failed[-1] if failed else None


def _assemble(obs: Observed, plan: Plan, can_start: bool) -> None:
    job = obs.jobs.get(n.COMPONENT_ASSEMBLE)
    plan.state = "Assembling"
    if _job_missing_or_failed(obs, plan, job, n.COMPONENT_ASSEMBLE, can_start) or job is None:
        return
    if job.succeeded and obs.submission is not None:
        step = judge_step(obs.spec, obs.jobs.get(n.COMPONENT_JUDGE), obs.judge)
        plan.judge = step.estimate
        if not step.done:
            plan.state, plan.reason, plan.message = "Judging", "Judging", step.message
            if step.create and can_start:
                plan.create_jobs.append(n.COMPONENT_JUDGE)
            _job_pods_waiting(obs, plan, n.COMPONENT_JUDGE)
            return
        plan.state, plan.reason = "Succeeded", "SubmissionReady"
        plan.message = f"submission at {obs.submission.uri}{step.message}"
        return
    plan.reason = "SubmissionUnreadable" if job.succeeded and obs.submission_error else "Assembling"
    plan.message = obs.submission_error if job.succeeded and obs.submission_error else f"the assemble Job {job.name} builds the submission"
    _job_pods_waiting(obs, plan, n.COMPONENT_ASSEMBLE)


def _cleanup_jobs(obs: Observed, plan: Plan) -> None:
    """After the run ends, Jobs follow the cleanup policy (their pods' logs go with them)."""
    for job in obs.jobs.values():
        if not keep_job(obs.spec, job) and job.name not in plan.delete_jobs:
            plan.delete_jobs.append(job.name)


def _failure_summary(t: Tally) -> str:
    reasons = ", ".join(f"{count} {reason or 'unknown'}" for reason, count in sorted(t.failure_reasons.items(), key=lambda kv: -kv[1]))
    return f"{t.failed} failed samples ({reasons})" if reasons else f"{t.failed} failed samples"


def _samples_phase(obs: Observed, plan: Plan, samples: tuple[str, ...], can_start: bool) -> None:
    stopped = suspended_now(obs)
    _record_pods(obs, plan)
    if stopped:
        _pause(obs, plan)
    _record_lost(obs, plan, stopped or not can_start)
    t = tally(obs.spec, samples, plan.ledger, obs.sectors)
    allowed = budget_allowed(obs.spec.failure_budget, t.total)
    if t.failed > allowed:
        message = f"{_failure_summary(t)} exceed the failure budget of {allowed} ({obs.spec.failure_budget})"
        _fail(obs, plan, "FailureBudgetExceeded", message)
        plan.tally = tally(obs.spec, samples, plan.ledger, obs.sectors)
        return
    if t.pending or t.running:
        plan.budget = run_limit_reached(obs.spec.budget, spent(obs.spec, t)) or ""
        if can_start and not stopped and not plan.budget:
            _fill_window(obs, plan, samples)
        plan.tally = tally(obs.spec, samples, plan.ledger, obs.sectors)
        plan.state = "Suspended" if stopped else "Running"
        plan.reason = "Suspended" if stopped else ("BudgetExhausted" if plan.budget else "PodsNotStarting" if plan.waiting else "SamplesRunning")
        plan.message = f"{plan.tally.running} running, {plan.tally.pending} pending, {plan.tally.done}/{plan.tally.total} done"
        if plan.budget:
            plan.message += f"; no new pods: {plan.budget}; raise spec.budget to go on"
        _queue_reason(obs, plan)
        plan.network_policy = True  # egress of sample pods: by address with the network off, never to metadata services
        return
    plan.tally = t
    _assemble(obs, plan, can_start and not stopped)


def decide(obs: Observed) -> Plan:
    """One reconcile pass over one GdpvalRun."""
    plan = Plan(ledger=dict(obs.ledger))
    if obs.status.state in TERMINAL_STATES:
        return _settled(obs, plan)
    can_start = not obs.blockers
    deadline = deadline_at(obs.spec, obs.status, obs.now)
    if deadline is not None and not suspended_now(obs):
        plan.wake_at.append(deadline)
    if obs.samples is None:
        _prepare(obs, plan, can_start)
    else:
        _samples_phase(obs, plan, obs.samples, can_start)
    if plan.state not in TERMINAL_STATES and deadline is not None and obs.now >= deadline:
        _fail(obs, plan, "DeadlineExceeded", f"the run exceeded spec.deadlineSeconds ({obs.spec.deadline_seconds}s)")
    if plan.state in TERMINAL_STATES:
        _cleanup_jobs(obs, plan)
    else:
        _suspend_jobs(obs, plan)
    _workload_step(obs, plan)
    return plan


def _queue_reason(obs: Observed, plan: Plan) -> None:
    """A run Kueue holds (and not the user) says so in its reason and message."""
    why = None if obs.spec.suspend else held(obs)
    if why is not None:
        plan.reason, plan.message = why[0], f"{why[1]}; {plan.message}"


def _workload_step(obs: Observed, plan: Plan) -> None:
    """The queued run's Workload: created once; its quota given back after an eviction once nothing
    runs, or at the end (Finished). Its status is read again soon: Kueue's decisions arrive by polling."""
    if obs.queueing is None:
        return
    view = obs.workload
    if view is None and not obs.blockers and plan.state not in TERMINAL_STATES:
        plan.workload = WORKLOAD_CREATE
    elif view is not None and plan.state in TERMINAL_STATES and not view.finished:
        plan.workload = WORKLOAD_FINISH
    elif must_release(view, _active(obs, plan)):
        plan.workload = WORKLOAD_RELEASE
    if plan.state not in TERMINAL_STATES:
        plan.wake_at.append(obs.now + QUEUE_POLL_SECONDS)


def _active(obs: Observed, plan: Plan) -> bool:
    """Anything of the run still holds resources: a live sample pod, or a Job's pod not yet stopped."""
    pods = any(p.component == n.COMPONENT_SAMPLE and not p.terminal for p in obs.pods)
    return pods or bool(plan.create_pods) or any(j.active for j in obs.jobs.values())


def _suspend_jobs(obs: Observed, plan: Plan) -> None:
    """spec.suspend reaches an unfinished Job as the Job's own suspend: its pod stops, and it goes on when unset."""
    want = suspended_now(obs)
    for job in obs.jobs.values():
        if not (job.succeeded or job.failed) and job.suspended != want:
            plan.suspend_jobs.append((job.name, want))
        if want and not (job.succeeded or job.failed) and plan.state not in ("Running", "Suspended"):
            plan.state, plan.reason, plan.message = "Suspended", "Suspended", f"the {job.component} Job {job.name} is suspended"
            _queue_reason(obs, plan)


def _settled(obs: Observed, plan: Plan) -> Plan:
    """A finished run only tidies up: stragglers deleted, counts kept as they were; it never creates.

    Its status was written before its last deletions, so a failed run may still have a Job running.
    """
    prev = obs.status
    plan.state, plan.reason = prev.state, next((c.reason for c in prev.conditions if c.type == prev.state and c.status == "True"), prev.state)
    plan.message = next((c.message for c in prev.conditions if c.type == prev.state), "")
    for pod in obs.pods:
        if pod.component == n.COMPONENT_SAMPLE and (not pod.terminal or not keep_pod(obs.spec, Outcome.lost if prev.state == "Failed" else Outcome.succeeded)):
            _delete(plan, pod)
    if prev.state == "Failed":
        _stop_jobs(obs, plan)
    _cleanup_jobs(obs, plan)
    _workload_step(obs, plan)
    if obs.samples is not None:
        plan.tally = tally(obs.spec, obs.samples, plan.ledger, obs.sectors)
    expires = ttl_expires_at(obs.spec, prev)
    if expires is not None and expires <= obs.now:
        plan.delete_run = True
    elif expires is not None:
        plan.wake_at.append(expires)
    return plan

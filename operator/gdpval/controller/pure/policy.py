"""How patient and how tidy a run is: retries, backoff, the failure budget, cleanup. No I/O.

`reconcile` decides what happens next; these pure functions of the spec and an outcome hold the
numbers and rules it applies, so each rule is read and tested on its own.
"""

from __future__ import annotations

from gdpval.api.v1alpha1 import GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.pure.ledger import Entry, Outcome
from gdpval.controller.pure.observe import JobView, parse_time

# (connect, read) seconds for each of the operator's own calls (its reads and deletes are retried
# 3 times by urllib3, so a hung GET gives up after about 2 minutes); kopf's watches have their own.
REQUEST_TIMEOUT = (10.0, 30.0)
# New sample pods one pass asks for at most: a run filling a large window takes several short passes,
# and the runs waiting for a pass slot (served in turn) get theirs in between. 25 creations issued
# 16 at a time take about 0.3 s on a loaded 2-core test machine (bench/README.md), and still let one
# run start some 15 pods a second, far more than samples of minutes need.
MAX_CREATES_PER_PASS = 25
# A refused pod create (quota, admission) is tried again after this; the API's message shows meanwhile.
CREATE_RETRY_SECONDS = 30.0
# A refused Job create blocks the run this long, then the next pass tries again.
JOB_ERROR_SECONDS = 30.0
# A blocked run (missing Secret, unreachable storage) is looked at again after this.
BLOCKED_RETRY_SECONDS = 30.0
# A run's Secrets found complete are read again after this (or at once when the spec names others):
# a Secret deleted mid-run shows within it, a missing one is read on every pass until it exists.
SECRET_RECHECK_SECONDS = 300.0
# The ledger changed under a pass: another pass soon reads the new version.
CONFLICT_RETRY_SECONDS = 1.0
# Pods of one attempt that may vanish or be disrupted (preempted, evicted, node shutdown) before
# writing anything and be re-created under the same attempt number; the next such loss costs the attempt.
MAX_RECREATIONS = 3
# While the model endpoint is unavailable, a held attempt starts again as the probe this long after
# the last hold (its pod then probes with backoff for up to contract.OUTAGE_HOLD_SECONDS itself).
OUTAGE_PROBE_SECONDS = 30.0
# /healthz fails when runs exist and no reconcile pass has ended for this long. A run is passed at
# least every 60 s (resync, error backoff) and a hung API call gives up within about 2 minutes, so
# only a wedged operator stays this long without one; its liveness probe then restarts it.
WATCHDOG_SECONDS = 600.0
# Passes failing in a row: backoff doubles up to the cap; the run's status says so from the Nth.
MAX_ERROR_BACKOFF_SECONDS = 60.0
REPORT_AFTER_ERRORS = 3

_ENDED_BADLY = (Outcome.failed, Outcome.lost)
# The window of sample pods shrinks by this factor in a pass where an ended attempt met rate limits.
WINDOW_DECREASE = 0.75


def next_window(window: int, ceiling: int, limited: int, clean: int) -> int:
    """How many sample pods may call the model at once, AIMD over the attempts a pass saw end: any
    that met rate limits cut the window by a quarter (once a pass), else each that met none adds one.
    Always within 1..ceiling (spec.parallelism): lowering parallelism lowers it at once."""
    window = min(max(1, window), ceiling)
    if limited:
        return max(1, int(window * WINDOW_DECREASE))
    return min(ceiling, window + clean)


def budget_allowed(budget: int | str, total: int) -> int:
    """Failed samples the run tolerates: a count, or a percentage of all samples (rounded down)."""
    if isinstance(budget, int):
        return budget
    text = str(budget).strip()
    if text.endswith("%"):
        return total * int(text[:-1]) // 100
    return int(text)


def max_attempts(spec: GdpvalRunSpec) -> int:
    return 1 + spec.samples.retries


def backoff(spec: GdpvalRunSpec, attempt: int) -> float:
    """Delay after `attempt` failed: doubling from backoffSeconds, capped at maxBackoffSeconds."""
    policy = spec.samples
    return float(min(policy.max_backoff_seconds, policy.backoff_seconds * 2 ** max(0, attempt - 1)))


def gave_up(spec: GdpvalRunSpec, entry: Entry) -> bool:
    """The sample's last attempt ended without success and no retry is left: it counts as failed."""
    return entry.outcome in _ENDED_BADLY and entry.attempt >= max_attempts(spec)


def retry_at(spec: GdpvalRunSpec, entry: Entry) -> float | None:
    """When the sample's next attempt may start, or None when none will (running, succeeded, gave up)."""
    if entry.outcome not in _ENDED_BADLY or gave_up(spec, entry):
        return None
    return entry.ended + backoff(spec, entry.attempt)


def may_recreate(entry: Entry) -> bool:
    """A lost pod that left nothing behind is free to replace, a bounded number of times per attempt."""
    return entry.recreated < MAX_RECREATIONS


def create_retry_at(refused: tuple[float, str] | None, now: float) -> float | None:
    """When a refused pod create may be tried again, or None when nothing holds it back."""
    if refused is None or now - refused[0] >= CREATE_RETRY_SECONDS:
        return None
    return refused[0] + CREATE_RETRY_SECONDS


def job_error_current(refused_at: float, now: float) -> bool:
    """A refused Job create still blocks the run (afterwards the create is simply tried again)."""
    return now - refused_at < JOB_ERROR_SECONDS


def secrets_due(checked_at: float | None, now: float) -> bool:
    """The run's Secrets must be read: never checked complete, or the last check is too old."""
    return checked_at is None or now - checked_at >= SECRET_RECHECK_SECONDS


def error_backoff(errors: int) -> float:
    """Delay before the next pass after `errors` failed passes in a row."""
    return min(MAX_ERROR_BACKOFF_SECONDS, 2.0**errors)


def report_errors(errors: int) -> bool:
    """Failures this persistent belong in the run's status, not only in the operator's log."""
    return errors >= REPORT_AFTER_ERRORS


def _keep(spec: GdpvalRunSpec, failed: bool) -> bool:
    policy = spec.cleanup_policy
    return policy == "Keep" or (policy == "KeepFailed" and failed)


def keep_pod(spec: GdpvalRunSpec, outcome: Outcome) -> bool:
    """A finished sample pod stays for its logs when the policy keeps it; only success counts as not failed."""
    return _keep(spec, outcome != Outcome.succeeded)


def keep_job(spec: GdpvalRunSpec, job: JobView) -> bool:
    """A Job stays while it runs (a failed run deletes those itself), or when the policy keeps it."""
    return bool(job.active) or _keep(spec, job.failed)


def suspended_since(status: GdpvalRunStatus) -> float | None:
    """When the current suspension began (the Suspended condition's transition), or None."""
    return next((parse_time(c.last_transition_time) for c in status.conditions if c.type == "Suspended" and c.status == "True"), None)


def paused_seconds(status: GdpvalRunStatus, now: float) -> float:
    """Time spent suspended: ended suspensions plus the current one."""
    since = suspended_since(status)
    return status.suspended_seconds + (now - since if since else 0.0)


def deadline_at(spec: GdpvalRunSpec, status: GdpvalRunStatus, now: float) -> float | None:
    """When spec.deadlineSeconds runs out: suspended time does not count (a suspended run's deadline moves with the clock)."""
    if not spec.deadline_seconds:
        return None
    return (parse_time(status.start_time) or now) + spec.deadline_seconds + paused_seconds(status, now)


def ttl_expires_at(spec: GdpvalRunSpec, status: GdpvalRunStatus) -> float | None:
    """When a finished run is deleted (ttlSecondsAfterFinished after its completion), or None when it stays."""
    if spec.ttl_seconds_after_finished is None or not status.completion_time:
        return None
    return parse_time(status.completion_time) + spec.ttl_seconds_after_finished


def stalled(runs: int, last_pass: float, now: float) -> bool:
    """The operator has runs to reconcile but has ended no pass for `WATCHDOG_SECONDS`."""
    return runs > 0 and now - last_pass >= WATCHDOG_SECONDS

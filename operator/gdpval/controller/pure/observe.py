"""Small, immutable views of our pods and Jobs, parsed from raw API objects (what the indexes keep)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gdpval import contract
from gdpval.controller.pure import names as n

# Waiting reasons that never resolve by waiting: the pod is stuck at once.
PERMANENT_WAITING = frozenset({"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"})
# Waiting reasons worth reporting while the pending timeout runs.
NOTABLE_WAITING = PERMANENT_WAITING | {"ErrImagePull", "ImagePullBackOff", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}
# A failed pod's status.reason when the cluster, not the pod, ended it (scheduler or kubelet
# preemption, node-pressure eviction, graceful node shutdown).
DISRUPTION_REASONS = frozenset({"Preempted", "Preempting", "Evicted", "Terminated", "Shutdown", "NodeShutdown"})
# A pod condition (True) by which the cluster marks a pod it ends: Kubernetes' DisruptionTarget, and
# Kueue's TerminationTarget on a pod of a Workload it preempts or evicts (the pod integration).
DISRUPTION_CONDITIONS = frozenset({"DisruptionTarget", "TerminationTarget"})
# The kubelet's eviction messages when a pod passes its own limits (an emptyDir's sizeLimit, a
# container's or the pod's ephemeral-storage limit): the sample did it, so it costs an attempt.
OWN_LIMIT_MESSAGES = ("exceeds the limit", "exceeded its local ephemeral storage limit", "exceeds the total limit of containers")


def parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class PodView:
    name: str
    component: str
    sample: str
    attempt: int
    phase: str
    deleting: bool
    created: float
    waiting: str = ""  # e.g. "ImagePullBackOff (sandbox): <message>"
    waiting_reason: str = ""
    unschedulable: str = ""
    failure: str = ""  # why a Failed pod failed, short
    message: str = ""  # termination message of the failed container (logs tail), for conditions
    exit_code: int = 0  # of the failed container
    disrupted: bool = False  # ended by the cluster (DisruptionTarget, preemption, eviction, node shutdown)
    gated: str = ""  # scheduling gates holding it (Kueue admission and the like), comma-separated
    scheduled: float = 0.0  # when it was bound to a node (PodScheduled=True), 0 before
    model_unavailable: bool = False  # a container exited with EXIT_MODEL_UNAVAILABLE: the endpoint's outage ended it
    ahead: bool = False  # started ahead of its turn (spec.samples.startAhead), its go not given yet
    ready: bool = False  # condition Ready: for a pod started ahead, its agent waits ready for its go (manifests.ready_probe)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def pending_since(self) -> float:
        """Image pulls count from scheduling; waiting for a node counts from creation."""
        return self.scheduled or self.created


@dataclass(frozen=True)
class JobView:
    name: str
    component: str
    active: int
    succeeded: bool
    failed: bool
    message: str
    created: float
    suspended: bool = False  # spec.suspend: the Job controller stopped its pods


def _statuses(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]


def _waiting(status: Mapping[str, Any]) -> tuple[str, str]:
    for cs in _statuses(status):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in NOTABLE_WAITING:
            return reason, f"{reason} ({cs.get('name')}): {waiting.get('message', '')}".strip().rstrip(":")
    return "", ""


def _unschedulable(status: Mapping[str, Any]) -> str:
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return cond.get("message", "Unschedulable")
    return ""


def _scheduled(status: Mapping[str, Any]) -> float:
    for cond in status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_time(cond.get("lastTransitionTime"))
    return 0.0


def pod_ready(status: Mapping[str, Any]) -> bool:
    """Condition Ready is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))


def _gates(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    names = [g.get("name", "") for g in spec.get("schedulingGates") or []]
    if not names and any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated" for c in status.get("conditions", [])):
        names = ["SchedulingGated"]
    return ", ".join(names)


def _disrupted(status: Mapping[str, Any]) -> bool:
    if over_own_limit(status):
        return False
    if any(c.get("type") in DISRUPTION_CONDITIONS and c.get("status") == "True" for c in status.get("conditions", [])):
        return True
    return status.get("phase") == "Failed" and status.get("reason") in DISRUPTION_REASONS


def over_own_limit(status: Mapping[str, Any]) -> bool:
    """Evicted for what the pod itself used, not for the node's pressure (the kubelet marks both
    with DisruptionTarget)."""
    message = status.get("message") or ""
    return status.get("reason") == "Evicted" and any(m in message for m in OWN_LIMIT_MESSAGES)


def _failure(status: Mapping[str, Any]) -> tuple[str, str, int]:
    """A short reason, the failed container's termination message and its exit code."""
    if status.get("phase") != "Failed":
        return "", "", 0
    for cs in _statuses(status):
        term = (cs.get("state") or {}).get("terminated") or {}
        if term and term.get("exitCode", 0) != 0:
            reason = f"{cs.get('name')}-{term.get('reason') or 'Error'}-exit{term.get('exitCode')}"
            return reason, (term.get("message") or "").strip()[-400:], int(term["exitCode"])
    reason = "LimitExceeded" if over_own_limit(status) else status.get("reason") or "Failed"
    return reason, status.get("message", ""), 0


def _model_unavailable(status: Mapping[str, Any]) -> bool:
    return any(((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == contract.EXIT_MODEL_UNAVAILABLE for cs in _statuses(status))


def parse_pod(body: Mapping[str, Any]) -> PodView:
    meta = body.get("metadata", {})
    labels = meta.get("labels", {}) or {}
    annotations = meta.get("annotations", {}) or {}
    status = body.get("status", {}) or {}
    reason, waiting = _waiting(status)
    failure, message, exit_code = _failure(status)
    try:
        attempt = int(labels.get(n.L_ATTEMPT, "0"))
    except ValueError:
        attempt = 0
    return PodView(
        name=meta.get("name", ""),
        component=labels.get(n.L_COMPONENT, ""),
        sample=annotations.get(n.A_SAMPLE_ID) or labels.get(n.L_SAMPLE, ""),
        attempt=attempt,
        phase=status.get("phase", "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        created=parse_time(meta.get("creationTimestamp")),
        waiting=waiting,
        waiting_reason=reason,
        unschedulable=_unschedulable(status),
        failure=failure,
        message=message,
        exit_code=exit_code,
        disrupted=_disrupted(status),
        gated=_gates(body.get("spec", {}) or {}, status),
        scheduled=_scheduled(status),
        model_unavailable=status.get("phase") == "Failed" and _model_unavailable(status),
        ahead=annotations.get(n.A_GO) == "",
        ready=pod_ready(status),
    )


def parse_job(body: Mapping[str, Any]) -> JobView:
    meta = body.get("metadata", {})
    status = body.get("status", {}) or {}
    conds = {c.get("type"): c for c in status.get("conditions", []) if c.get("status") == "True"}
    failed = conds.get("Failed")
    return JobView(
        name=meta.get("name", ""),
        component=(meta.get("labels") or {}).get(n.L_COMPONENT, ""),
        active=int(status.get("active", 0) or 0),
        succeeded="Complete" in conds,
        failed=failed is not None,
        message=(failed or {}).get("message", "") or (failed or {}).get("reason", ""),
        created=parse_time(meta.get("creationTimestamp")),
        suspended=bool((body.get("spec") or {}).get("suspend")),
    )

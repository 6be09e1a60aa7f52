"""A whole GdpvalRun queued in Kueue as one Workload, the way Kueue's own job integrations do it.

A run labelled `kueue.x-k8s.io/queue-name` gets one Workload (podSet "sample": the sample pod's shape,
`parallelism` pods and those started ahead of their turn, spec.samples.startAhead: each holds what it
requests while it waits). Until Kueue reserves quota and admits it, the run holds as if suspended,
and a change of either resizes the Workload; once admitted, the run keeps within what was admitted.
When Kueue evicts it (preemption), the run stops its pods like a suspend and then gives the quota
back (admission unset, QuotaReserved False), as Kueue's job reconciler does for a stopped job, so the
Workload queues again. A finished run marks its Workload Finished, which releases the quota.
Pure functions here; what the run reads of its labels and its Workload is in `workload`, the calls in `kube`, the reads in `gather`, the writes in `effects`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.controller.pure import names as n
from gdpval.controller.pure.manifests import RunContext, sample_pod
from gdpval.controller.pure.observe import iso
from gdpval.controller.pure.workload import Queueing, WorkloadView, condition

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "workloads"
POD_SET = "sample"
# Evictions after which Kueue's job reconciler marks a Workload Requeued=True (others wait to be reactivated).
REQUEUED_ON = ("Preempted", "NodeFailures")
# What a sample pod's shape in the Workload keeps: what Kueue counts against quota and matches to flavors.
_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "runtimeClassName")
_CONTAINER_FIELDS = ("name", "image", "resources", "restartPolicy")
QUEUED = "QueuedByKueue"
EVICTED = "EvictedByKueue"


def workload_name(run: str, uid: str) -> str:
    """Unique per run instance: a run recreated under the same name never adopts the old Workload."""
    return n.dns_label("gdpvalrun", run, uid[:5])


def pods_wanted(spec: GdpvalRunSpec) -> int:
    """The most sample pods a run holds at once: its window and the pods started ahead of it."""
    return spec.parallelism + spec.samples.start_ahead


def admitted_pods(queueing: Queueing | None, view: WorkloadView | None) -> int | None:
    """The sample pods Kueue reserved quota for, which the run never exceeds; None when no Workload bounds it."""
    return view.pods if queueing is not None and view is not None and view.reserved else None


def over_quota(spec: GdpvalRunSpec, queueing: Queueing | None, view: WorkloadView | None) -> str:
    """What the status says while the run asks more pods than Kueue admitted (changed after admission), or ""."""
    admitted, wanted = admitted_pods(queueing, view), pods_wanted(spec)
    if admitted is None or admitted >= wanted:
        return ""
    return f"Kueue admitted {admitted} sample pods, fewer than parallelism + startAhead ({wanted}): the run keeps to {admitted} until it is queued again"


def must_resize(spec: GdpvalRunSpec, view: WorkloadView | None) -> bool:
    """parallelism or startAhead changed while the Workload waits for quota: it asks for the new size (a reserved
    Workload's podSets are immutable, so an admitted run keeps within its size instead: `admitted_pods`)."""
    return view is not None and not view.reserved and not view.finished and view.pods != pods_wanted(spec)


def resize_patch(view: WorkloadView, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload's podSets as `manifest` has them, only if nothing changed since `view` was read."""
    return {"metadata": {"resourceVersion": view.resource_version}, "spec": {"podSets": manifest["spec"]["podSets"]}}


def _shape(container: Mapping[str, Any]) -> dict[str, Any]:
    return {k: container[k] for k in _CONTAINER_FIELDS if k in container}


def workload_manifest(ctx: RunContext, queueing: Queueing, priority: int | None = None) -> dict[str, Any]:
    """The run's Workload: one podSet of `pods_wanted` sample pods, shaped by the sample pod builder itself."""
    pod = sample_pod(ctx, "sample", 1)["spec"]
    template = {k: pod[k] for k in _POD_FIELDS if k in pod}
    template["containers"] = [_shape(c) for c in pod["containers"]]
    template["initContainers"] = [_shape(c) for c in pod.get("initContainers", [])]
    spec: dict[str, Any] = {
        "queueName": queueing.queue,
        "podSets": [{"name": POD_SET, "count": pods_wanted(ctx.spec), "template": {"spec": template}}],
    }
    if queueing.priority:
        spec["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": queueing.priority}
        if priority is not None:
            spec["priority"] = priority
    labels = n.base_labels(ctx.name, ctx.uid, "workload")
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": workload_name(ctx.name, ctx.uid), "namespace": ctx.namespace, "labels": labels, "ownerReferences": [ctx.owner_reference()]},
        "spec": spec,
    }


def _set(conditions: list[dict[str, Any]], kind: str, status: bool, reason: str, message: str, now: float) -> None:
    """Kueue's SetStatusCondition: the transition time moves only when the status flips."""
    value = "True" if status else "False"
    old = condition(conditions, kind)
    since = old.get("lastTransitionTime") if old and old.get("status") == value else iso(now)
    new = {"type": kind, "status": value, "reason": reason, "message": message[:32768], "lastTransitionTime": since}
    conditions[:] = [c for c in conditions if c.get("type") != kind] + [new]


def _status_patch(view: WorkloadView, conditions: list[dict[str, Any]], **status: Any) -> dict[str, Any]:
    """A merge patch of the whole conditions list, only if nothing changed since `view` was read."""
    return {"metadata": {"resourceVersion": view.resource_version}, "status": {"conditions": conditions, **status}}


def release_patch(view: WorkloadView, now: float) -> dict[str, Any]:
    """Give back an evicted run's quota once its pods are gone (Kueue's UnsetQuotaReservationWithCondition)."""
    conditions = [dict(c) for c in view.conditions]
    _set(conditions, "Requeued", view.evicted in REQUEUED_ON, view.evicted, view.evicted_message, now)
    _set(conditions, "QuotaReserved", False, "Pending", view.evicted_message, now)
    _set(conditions, "Admitted", False, "NoReservation", "The workload has no reservation", now)
    return _status_patch(view, conditions, admission=None)


def finish_patch(view: WorkloadView, succeeded: bool, message: str, now: float) -> dict[str, Any]:
    """The run ended: Finished (reason Succeeded or Failed) releases its quota."""
    conditions = [dict(c) for c in view.conditions]
    _set(conditions, "Finished", True, "Succeeded" if succeeded else "Failed", message, now)
    return _status_patch(view, conditions)


def hold_reason(queueing: Queueing, view: WorkloadView | None) -> tuple[str, str] | None:
    """Why a queued run may not run now (reason, message), or None once Kueue admitted it."""
    if view is not None and view.runs:
        return None
    if view is not None and view.evicted:
        return EVICTED, f"evicted by Kueue ({view.evicted}: {view.evicted_message}); its pods are stopped and it waits in queue {queueing.queue} again"
    detail = f": {view.pending_message}" if view is not None and view.pending_message else ""
    return QUEUED, f"waiting for admission by Kueue in queue {queueing.queue}{detail}"


def must_release(view: WorkloadView | None, active: bool) -> bool:
    """An evicted Workload gives its quota back once the run has nothing left running (`active`)."""
    return view is not None and bool(view.evicted) and view.reserved and not active

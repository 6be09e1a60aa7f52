"""What a run reads of Kueue: the labels that queue it, and its Workload's status (Kueue's condition types).

Plain views of objects, at the bottom of the controller beside `observe`: the queue's decisions
(`queue`) and the run's observed world (`types`) build on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@dataclass(frozen=True)
class Queueing:
    """The run's Kueue labels: the LocalQueue it waits in, and an optional WorkloadPriorityClass."""

    queue: str
    priority: str = ""

    @classmethod
    def of(cls, labels: Mapping[str, str] | None) -> Queueing | None:
        queue = (labels or {}).get(QUEUE_LABEL, "")
        return cls(queue, (labels or {}).get(PRIORITY_LABEL, "")) if queue else None


@dataclass(frozen=True)
class WorkloadView:
    """What the run reads of its Workload's status (Kueue's condition types)."""

    name: str
    resource_version: str = ""
    reserved: bool = False  # QuotaReserved
    admitted: bool = False  # Admitted: quota reserved and every admission check ready
    evicted: str = ""  # the Evicted condition's reason while it is True
    evicted_message: str = ""
    finished: bool = False
    pending_message: str = ""  # why Kueue has not reserved quota yet (QuotaReserved False)
    pods: int = 0  # the sample pods it asks quota for (its podSets' counts)
    conditions: tuple[Mapping[str, Any], ...] = ()

    @property
    def runs(self) -> bool:
        """The run may have pods: admitted and not being evicted."""
        return self.admitted and self.reserved and not self.evicted


def condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _true(conditions: Sequence[Mapping[str, Any]], kind: str) -> bool:
    cond = condition(conditions, kind)
    return bool(cond and cond.get("status") == "True")


def parse_workload(body: Mapping[str, Any]) -> WorkloadView:
    status = body.get("status") or {}
    conditions = list(status.get("conditions") or [])
    evicted = condition(conditions, "Evicted")
    evicted_true = evicted is not None and evicted.get("status") == "True"
    reserved = condition(conditions, "QuotaReserved")
    return WorkloadView(
        name=body.get("metadata", {}).get("name", ""),
        resource_version=body.get("metadata", {}).get("resourceVersion", ""),
        reserved=_true(conditions, "QuotaReserved") and status.get("admission") is not None,
        admitted=_true(conditions, "Admitted"),
        evicted=(evicted.get("reason") or "Evicted") if evicted is not None and evicted_true else "",
        evicted_message=(evicted.get("message") or "") if evicted is not None and evicted_true else "",
        finished=_true(conditions, "Finished"),
        pending_message=(reserved.get("message") or "") if reserved and reserved.get("status") != "True" else "",
        conditions=tuple(conditions),
        pods=sum(int(ps.get("count") or 0) for ps in (body.get("spec") or {}).get("podSets") or []),
    )

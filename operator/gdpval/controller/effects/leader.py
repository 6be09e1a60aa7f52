"""Leader election on a coordination.k8s.io Lease, so two operator replicas never both act.

The rules are client-go's: a replica acquires the Lease when nobody holds it or when the holder
has not renewed it for `duration` seconds *as this replica observed it* (its own clock measures
how long the Lease stayed unchanged, so skewed clocks do not matter); the leader renews every
`retry` seconds and stops acting when it could not renew for `renew_deadline` seconds, which is
shorter than `duration`: it has stopped before anyone else may take over. Every write carries the
resourceVersion it read, so two candidates racing for a free Lease cannot both win.

The decisions are pure functions over `LeaseRecord`; `LeaseClient` makes the blocking API calls
and `Elector` runs them in threads.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gdpval.controller.pure.policy import REQUEST_TIMEOUT

log = logging.getLogger("gdpval.operator")


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: a Lease not renewed for 15 s is free; a leader gives up after 10 s of failed renewals."""

    duration: float = 15.0
    renew_deadline: float = 10.0
    retry: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise ValueError(f"leader election needs 0 < retry < renew deadline < lease duration, got {self}")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str = ""
    duration: int = 15
    transitions: int = 0
    renewed: str = ""  # the holder's renewTime, only compared for change
    version: str = ""  # resourceVersion


@dataclass(frozen=True)
class Seen:
    """The Lease as this replica last saw it, and when (its monotonic clock)."""

    record: LeaseRecord
    at: float


class Step(Enum):
    create = "create"  # no Lease yet
    take = "take"  # free or expired: write ourselves as holder
    renew = "renew"  # ours: write a new renewTime
    wait = "wait"  # someone else holds it


def observe(seen: Seen | None, record: LeaseRecord | None, now: float) -> Seen | None:
    """Restart the expiry clock whenever the holder or its renewal changed."""
    if record is None:
        return None
    if seen is not None and (seen.record.holder, seen.record.renewed) == (record.holder, record.renewed):
        return Seen(record, seen.at)
    return Seen(record, now)


def next_step(seen: Seen | None, me: str, now: float) -> Step:
    if seen is None:
        return Step.create
    if seen.record.holder == me:
        return Step.renew
    if not seen.record.holder or now - seen.at >= seen.record.duration:
        return Step.take
    return Step.wait


def lost(last_renewed: float, now: float, timing: Timing) -> bool:
    """The leader must stop acting: its last successful renewal is older than the renew deadline."""
    return now - last_renewed >= timing.renew_deadline


def claimed(record: LeaseRecord, me: str, step: Step, timing: Timing) -> LeaseRecord:
    """The record to write for `step`: a take counts a transition; a renewal keeps the rest."""
    transitions = record.transitions + (1 if step == Step.take and record.holder != me else 0)
    return replace(record, holder=me, duration=int(timing.duration), transitions=transitions)


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseClient:
    """Blocking reads and compare-and-swap writes of one Lease."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str, timeout: tuple[float, float] = REQUEST_TIMEOUT):
        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.timeout = namespace, name, timeout

    def read(self) -> LeaseRecord | None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        return LeaseRecord(
            holder=spec.holder_identity or "",
            duration=int(spec.lease_duration_seconds or 15),
            transitions=int(spec.lease_transitions or 0),
            renewed=str(spec.renew_time or ""),
            version=lease.metadata.resource_version,
        )

    def write(self, record: LeaseRecord, create: bool) -> bool:
        """True when our write won (False: someone else wrote first, a 409)."""
        now = _micro_time()
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, **({} if create else {"resourceVersion": record.version})},
            "spec": {"holderIdentity": record.holder, "leaseDurationSeconds": record.duration, "leaseTransitions": record.transitions, "renewTime": now},
        }
        if record.holder:
            body["spec"]["acquireTime"] = now
        try:
            if create:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.timeout)
            else:
                self.api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True


class Elector:
    """Acquire the Lease, keep it, and say when it is lost; release it on a clean stop."""

    def __init__(self, lease: LeaseClient, identity: str, timing: Timing = Timing(), monotonic: Callable[[], float] = time.monotonic):
        self.lease, self.identity, self.timing, self.monotonic = lease, identity, timing, monotonic
        self.seen: Seen | None = None
        self.renewed_at = 0.0

    async def attempt(self) -> bool:
        """One round: read, then create, take or renew when the rules allow. True while we lead."""
        record = await asyncio.to_thread(self.lease.read)
        now = self.monotonic()
        self.seen = observe(self.seen, record, now)
        step = next_step(self.seen, self.identity, now)
        if step == Step.wait:
            return False
        base = record or LeaseRecord()
        won = await asyncio.to_thread(self.lease.write, claimed(base, self.identity, step, self.timing), step == Step.create)
        if won:
            self.renewed_at = now
            if step != Step.renew:
                log.info("leader election: %s now holds Lease %s/%s", self.identity, self.lease.namespace, self.lease.name)
        return won

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until we lead (True) or `stop` is set (False)."""
        log.info("leader election: %s waits for Lease %s/%s", self.identity, self.lease.namespace, self.lease.name)
        while not stop.is_set():
            if await self._attempt_safely():
                return True
            await _wait(stop, self.timing.retry)
        return False

    async def keep(self, lost_flag: asyncio.Event, stop: asyncio.Event) -> None:
        """Renew until `stop`; set `lost_flag` (and return) once renewals failed for the renew deadline."""
        while not stop.is_set():
            await _wait(stop, self.timing.retry)
            if stop.is_set():
                return
            renewed = await self._attempt_safely()
            taken = self.seen is not None and self.seen.record.holder not in ("", self.identity)
            if taken or (not renewed and lost(self.renewed_at, self.monotonic(), self.timing)):
                log.error("leader election: %s lost Lease %s/%s; stopping", self.identity, self.lease.namespace, self.lease.name)
                lost_flag.set()
                return

    async def release(self) -> None:
        """A clean stop hands the Lease over at once instead of after its duration."""
        record = await asyncio.to_thread(self.lease.read)
        if record is not None and record.holder == self.identity:
            await asyncio.to_thread(self.lease.write, replace(record, holder=""), False)

    async def _attempt_safely(self) -> bool:
        try:
            return await self.attempt()
        except Exception as exc:  # an API hiccup is one failed round, not a crash
            log.warning("leader election: %s", exc)
            return False


async def _wait(event: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(event.wait(), timeout=seconds)
    except TimeoutError:
        pass

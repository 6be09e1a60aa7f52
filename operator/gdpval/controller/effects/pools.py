"""One asyncio worker per GdpvalPool: keeps its pods at spec.size (controller.pure.pool decides), writes its status.

Woken by the pool's and its pods' watch events, and at least every `POOL_RESYNC_SECONDS`. Pods it created and the
watch does not show yet count as being created (`creating`), so a pass never asks for the same pod twice.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gdpval.api import v1alpha1 as api
from gdpval.controller.effects.fanout import fan_out, woken_passes
from gdpval.controller.effects.gather import indexed
from gdpval.controller.effects.kube import Kube
from gdpval.controller.pure import manifests, pool
from gdpval.controller.pure import names as n
from gdpval.controller.pure.pool import PooledView

log = logging.getLogger("gdpval.operator")
POOL_RESYNC_SECONDS = 30.0
CREATING_SECONDS = 60.0  # a pod created and still not shown by the watch after this long is no longer counted
PoolKey = tuple[str, str]


@dataclass
class PoolWorker:
    key: PoolKey
    body: dict[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    creating: dict[str, float] = field(default_factory=dict)  # pod name -> when this worker created it
    held_since: dict[str, float] = field(default_factory=dict)  # pod name -> when a pass first saw a run hold it
    token: bool = False  # the pool's tool-server Secret was made
    written: api.GdpvalPoolStatus | None = None


class Pools:
    def __init__(self, kube: Kube, images: tuple[str | None, str | None], defaults: api.PodDefaults, clock: Callable[[], float] = time.time):
        self.kube = kube
        self.images = images  # the operator's default agent and sandbox images
        self.defaults = defaults
        self.clock = clock
        self.index: Mapping[str, Any] = {}  # kopf's gdpval_pool_pods: namespace -> its pool pods
        self.workers: dict[PoolKey, PoolWorker] = {}

    def pods(self, namespace: str) -> tuple[PooledView, ...]:
        """The namespace's pool pods, claimed or not, as the watch shows them (what runs claim from)."""
        return indexed(self.index, namespace)

    def on_pool(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":
            worker = self.workers.pop(key, None)
            if worker and worker.task:
                worker.task.cancel()
            return
        worker = self.workers.get(key)
        if worker is None:
            worker = self.workers[key] = PoolWorker(key)
            worker.task = asyncio.create_task(self._loop(worker), name=f"gdpval-pool-{key[0]}-{key[1]}")
        worker.body = copy.deepcopy(dict(body))
        worker.wake.set()

    def on_pod(self, namespace: str, labels: Mapping[str, str]) -> None:
        for (ns, name), worker in self.workers.items():
            if ns == namespace and n.label_value(name) == labels.get(n.L_POOL):
                worker.wake.set()

    async def stop(self) -> None:
        tasks = [w.task for w in self.workers.values() if w.task]
        for task in tasks:
            task.cancel()
        self.workers.clear()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self, worker: PoolWorker) -> None:
        await woken_passes(worker.wake, lambda: self._pass(worker), 0.2)  # events of one burst share a pass

    async def _pass(self, worker: PoolWorker) -> float:
        try:
            return await asyncio.to_thread(self.reconcile, worker)
        except Exception:
            log.exception("pool %s/%s: reconcile failed; retrying", *worker.key)
            return 5.0

    def reconcile(self, worker: PoolWorker) -> float:
        """One pass: the pool's pods to the size its spec asks, its status written; the seconds until the next."""
        meta = worker.body.get("metadata", {})
        namespace, name, now = meta.get("namespace", ""), meta.get("name", ""), self.clock()
        try:
            spec = api.GdpvalPoolSpec.model_validate(worker.body.get("spec") or {})
        except ValidationError as exc:
            self._write_status(worker, api.GdpvalPoolStatus(message=f"fix the spec: {exc.errors()[0]['msg']}"))
            return POOL_RESYNC_SECONDS
        agent, sandbox = spec.images.agent or self.images[0] or "", spec.images.sandbox or self.images[1] or ""
        ctx = pool.pool_context(name, namespace, meta.get("uid", ""), spec, agent, sandbox, self.defaults)
        shape_id = pool.shape_hash(ctx)
        mine = [p for p in self.pods(namespace) if p.pool == n.label_value(name)]
        seen = {p.name for p in mine}
        worker.creating = {pod: t for pod, t in worker.creating.items() if pod not in seen and now - t < CREATING_SECONDS}
        plan = pool.decide_pool(spec, meta.get("generation", 0), shape_id, mine, len(worker.creating), now, worker.held_since)
        worker.held_since = plan.held_since
        if plan.create and not worker.token:
            self.kube.ensure_secret(manifests.token_secret(ctx, secrets.token_urlsafe(32)))
            worker.token = True
        fan_out(lambda pod: self.kube.delete_pod(namespace, pod), plan.delete)
        pods = [pool.pooled_pod(ctx, shape_id, secrets.token_hex(4)) for _ in range(plan.create)]
        refusals = [m for m in fan_out(self.kube.create_pod, pods) if m]
        worker.creating |= {p["metadata"]["name"]: now for p in pods}
        status = plan.status.model_copy(update={"message": f"pod creation refused: {refusals[0]}" if refusals else ""})
        self._write_status(worker, status)
        return max(min([t - now for t in plan.wake_at] + [POOL_RESYNC_SECONDS]), 5.0 if refusals else 0.0)

    def _write_status(self, worker: PoolWorker, status: api.GdpvalPoolStatus) -> None:
        if worker.written != status:
            body = status.model_dump(mode="json", by_alias=True)
            self.kube.patch_status(worker.key[0], worker.key[1], body, plural=api.POOL_PLURAL)
            worker.written = status

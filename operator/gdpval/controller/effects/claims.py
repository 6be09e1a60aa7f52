"""A run takes a started pod from a GdpvalPool instead of creating one (controller.pure.pool has the steps).

Safe against a crash between any two steps (see pool's docstring) and against two claimers: the first step's test
lets one win, and this process never offers a pod twice (`taken`), so its parallel claims do not race each other.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence

from gdpval.controller.effects.kube import Kube
from gdpval.controller.pure import pool
from gdpval.controller.pure.manifests import RunContext
from gdpval.controller.pure.pool import PooledView

log = logging.getLogger("gdpval.operator")
PoolPods = Callable[[str], Sequence[PooledView]]  # a namespace's pool pods, as the watch shows them


class Claimer:
    def __init__(self, kube: Kube, pool_pods: PoolPods = lambda namespace: ()):
        self.kube = kube
        self.pool_pods = pool_pods
        self.taken: dict[str, set[str]] = {}  # namespace -> pods offered once, kept while the watch still shows them
        self.lock = threading.Lock()

    def _next(self, namespace: str, shape_id: str) -> PooledView | None:
        with self.lock:
            pods = self.pool_pods(namespace)
            taken = self.taken[namespace] = self.taken.get(namespace, set()) & {p.name for p in pods}
            free = pool.candidates(pods, shape_id, taken)
            if not free:
                return None
            taken.add(free[0].name)
            return free[0]

    def claim(
        self, ctx: RunContext, sample: str, attempt: int, ahead: bool, credentials: Mapping[str, str], resolved: Mapping[str, list[str]] | None, now: float
    ) -> str | None:
        """The pod claimed for this attempt, or None when no free pod of the run's shape could be taken."""
        shape_id = pool.shape_hash(ctx, resolved)
        while (pod := self._next(ctx.namespace, shape_id)) is not None:
            if not self.kube.claim_step(ctx.namespace, pod.name, pool.lock_patch(pod, ctx.owner_reference())):
                continue  # another claimer won it, or it is gone
            claim = pool.claim_of(ctx, secrets.token_hex(8), sample, attempt, ahead, resolved)
            refused = self.kube.create_secret(pool.claim_secret(ctx, pod, claim.id, credentials))
            if refused:
                log.warning("run %s/%s: the claim Secret of pool pod %s was refused (%s); the pool deletes the pod", ctx.namespace, ctx.name, pod.name, refused)
                return None
            if self.kube.claim_step(ctx.namespace, pod.name, pool.claim_patch(ctx, claim, now - pod.created)):
                log.info("run %s/%s: %s attempt %d claimed pool pod %s", ctx.namespace, ctx.name, sample, attempt, pod.name)
                return pod.name
            log.warning("run %s/%s: pool pod %s went before its claim was complete; the pool deletes it", ctx.namespace, ctx.name, pod.name)
        return None

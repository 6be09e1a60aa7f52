"""A plan's effects on the cluster: the ledger, deletions, creations, the status, then Events.

The worker writes a terminal status before `apply`, so a run's end is recorded before its Jobs go.

Every call is idempotent (see `kube`), so a pass that dies halfway is simply repeated. Blocking
calls run in threads, or the whole of `apply` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Callable
from functools import partial

from gdpval.api import v1alpha1 as api
from gdpval.api.v1alpha1 import GdpvalRunStatus
from gdpval.controller.effects import s3 as s3io
from gdpval.controller.effects.claims import Claimer
from gdpval.controller.effects.fanout import fan_out, in_background
from gdpval.controller.effects.kube import Kube
from gdpval.controller.effects.memory import Refusals, RunMemory
from gdpval.controller.effects.resolve import Resolver, resolve_hosts
from gdpval.controller.pure import manifests, network, queue
from gdpval.controller.pure import names as n
from gdpval.controller.pure.ledger import encode_cluster, split
from gdpval.controller.pure.manifests import RunContext, judge_job
from gdpval.controller.pure.observe import iso
from gdpval.controller.pure.status import status_patch
from gdpval.controller.types import WORKLOAD_CREATE, WORKLOAD_RELEASE, WORKLOAD_RESIZE, Note, Observed, Plan

log = logging.getLogger("gdpval.operator")
Spawn = Callable[[Callable[[], None]], None]
_JOB_BUILDERS = {n.COMPONENT_PREPARE: manifests.prepare_job, n.COMPONENT_ASSEMBLE: manifests.assemble_job, n.COMPONENT_JUDGE: judge_job}


class Effects:
    def __init__(self, kube: Kube, resolve: Resolver = resolve_hosts, spawn: Spawn = in_background, claimer: Claimer | None = None):
        self.kube = kube
        self.resolve = resolve  # endpoint names to addresses (a stand-in in tests)
        self.spawn = spawn  # runs a call the pass does not wait for (at once, in tests)
        self.claimer = claimer or Claimer(kube)

    async def write_ledger(self, memory: RunMemory, ctx: RunContext, obs: Observed, plan: Plan, version: str | None) -> None:
        """First of all: a pod is created only once the ledger has it in flight (a Conflict ends the pass).

        A batch of ended entries goes to a new archive segment in S3 first, then the ConfigMap drops
        them and counts that segment. The written ledger and its new resourceVersion are remembered
        for the next pass; after a failed write (Conflict, timeout) nothing is, so the next pass reads
        the ConfigMap.
        """
        if version is None or plan.ledger == obs.ledger:
            return
        parts = split(plan.ledger, memory.archived)
        count = memory.segments + (1 if parts.archive else 0)
        data = encode_cluster(parts.cluster, count)
        try:
            if parts.archive:
                assert memory.storage is not None  # opened by the gather that read this ledger
                await asyncio.to_thread(s3io.write_segment, memory.storage, ctx.storage_name, count, parts.archive)
            removed = memory.cluster_keys - data.keys()
            written = await asyncio.to_thread(self.kube.write_ledger, ctx.namespace, n.ledger_name(ctx.name), data, version, removed)
        except BaseException:
            memory.forget_ledger()
            raise
        memory.ledger, memory.ledger_version = dict(plan.ledger), written
        memory.archived, memory.segments, memory.cluster_keys = memory.archived | parts.archive, count, frozenset(data)

    def apply(self, memory: RunMemory, ctx: RunContext, plan: Plan, now: float) -> bool:
        """Deletions, then the NetworkPolicy, then the go of pods started ahead, then creations (or claims of pool pods);
        True when the API refused a creation.

        Calls of one kind go together (`fan_out`); each kind waits for the one before it. Sample pods
        are deleted in the background (`_delete_pods`).
        """
        self._delete_pods(memory, ctx, plan.delete_pods)
        fan_out(lambda name: self.kube.delete_job(ctx.namespace, name), plan.delete_jobs)
        fan_out(lambda job: self.kube.suspend_job(ctx.namespace, *job), plan.suspend_jobs)
        if plan.network_policy and not memory.network_policy:
            memory.resolved = self._ensure_network_policy(ctx, plan)
            memory.network_policy = True
        if plan.create_pods and not memory.token_secret:
            self.kube.ensure_secret(manifests.token_secret(ctx, secrets.token_urlsafe(32)))
            memory.token_secret = True
        refused = False
        fan_out(lambda go: self.kube.patch_pod(ctx.namespace, go[0], manifests.go_patch(ctx.spec, go[1])), plan.go_pods)
        memory.went |= {name for name, _ in plan.go_pods}
        messages = fan_out(lambda pod: self._start_pod(memory, ctx, pod, pod in plan.ahead, now), plan.create_pods)
        for (sample, attempt), message in zip(plan.create_pods, messages, strict=True):
            refused |= _remember(memory.create_failures, sample, message, now)
            if message:
                plan.notes.append(Note("CreateFailed", f"pod for {sample} attempt {attempt} refused: {message}", warning=True))
        for component in plan.create_jobs:
            refused |= _remember(memory.job_errors, component, self.kube.create_job(_JOB_BUILDERS[component](ctx)), now)
        if plan.delete_run:
            self.kube.delete_run(ctx.namespace, ctx.name)
        return refused

    def _start_pod(self, memory: RunMemory, ctx: RunContext, pod: tuple[str, int], ahead: bool, now: float) -> str | None:
        """A free pool pod of the run's shape claimed for the attempt, else a pod of its own; the API's refusal or None."""
        if memory.secrets is not None and self.claimer.pool_pods(ctx.namespace):
            if self.claimer.claim(ctx, *pod, ahead, memory.secrets.claim_credentials(), memory.resolved, now):
                return None
        return self.kube.create_pod(manifests.sample_pod(ctx, *pod, resolved=memory.resolved, ahead=ahead))

    async def write_workload(self, ctx: RunContext, obs: Observed, plan: Plan) -> None:
        """A queued run's Workload: created (with its WorkloadPriorityClass's value, as Kueue's job
        integrations do), resized while it waits, or its status patched: quota given back after an eviction, or Finished."""
        queueing, view = obs.queueing, obs.workload
        if not plan.workload or queueing is None:
            return
        if plan.workload == WORKLOAD_CREATE:
            priority = await asyncio.to_thread(self.kube.workload_priority, queueing.priority) if queueing.priority else None
            if queueing.priority and priority is None:
                plan.notes.append(
                    Note("PriorityClassNotFound", f"WorkloadPriorityClass {queueing.priority!r} not found: the Workload queues at priority 0", warning=True)
                )
            refused = await asyncio.to_thread(self.kube.create_workload, queue.workload_manifest(ctx, queueing, priority))
            if refused:
                plan.notes.append(Note("WorkloadRefused", f"the Kueue Workload for queue {queueing.queue} was refused: {refused}", warning=True))
            return
        assert view is not None  # decide patches only a Workload it read
        resize = plan.workload == WORKLOAD_RESIZE
        if resize:
            patch = queue.resize_patch(view, queue.workload_manifest(ctx, queueing))
        elif plan.workload == WORKLOAD_RELEASE:
            patch = queue.release_patch(view, obs.now)
        else:
            patch = queue.finish_patch(view, plan.state == "Succeeded", plan.message, obs.now)
        refused = await asyncio.to_thread(self.kube.patch_workload, ctx.namespace, view.name, patch, status=not resize)
        if refused:
            plan.notes.append(Note("WorkloadRefused", f"the {plan.workload} of Kueue Workload {view.name} was refused: {refused}", warning=True))

    def _delete_pods(self, memory: RunMemory, ctx: RunContext, names: list[str]) -> None:
        """Deletions the pass does not wait for: the ledger already holds what each pod's end decided,
        so a delete that fails or dies with the operator is planned again by a later pass, and one in
        flight is not repeated. A pass at parallelism 500 is then its creations, not its cleanup."""
        for name in names:
            if name in memory.deleting:
                continue
            memory.deleting.add(name)
            self.spawn(partial(self._delete_pod, memory, ctx.namespace, name))

    def _delete_pod(self, memory: RunMemory, namespace: str, name: str) -> None:
        try:
            self.kube.delete_pod(namespace, name)
        except Exception:
            log.warning("could not delete pod %s/%s; a later pass tries again", namespace, name, exc_info=True)
        finally:
            memory.deleting.discard(name)

    def _ensure_network_policy(self, ctx: RunContext, plan: Plan) -> dict[str, list[str]]:
        """The policy by address: endpoint names are resolved here (and returned: sample pods are built from the same
        addresses), and one that does not resolve is named in an Event."""
        resolved, missing = self.resolve(network.hosts_to_resolve(ctx.spec))
        self.kube.ensure_network_policy(manifests.network_policy(ctx, resolved))
        for host in missing:
            message = f"endpoint host {host!r} did not resolve: network-off sample pods cannot reach it; fix the URL or add spec.sandbox.allowedEgress"
            plan.notes.append(Note("EndpointNotResolved", message, warning=True))
        return resolved

    async def write_status(self, memory: RunMemory, namespace: str, name: str, status: GdpvalRunStatus) -> None:
        """Write only on change; the worker's pacing bounds the rate."""
        if memory.written is not None and status_patch(memory.written) == status_patch(status):
            return
        await asyncio.to_thread(self.kube.patch_status, namespace, name, status_patch(status))
        memory.written = status

    async def post(self, ctx: RunContext, notes: list[Note], now: float) -> None:
        """Events, best effort and only after the status that says the same was written."""
        for note in notes:
            event = manifests.event(
                ctx.name,
                ctx.namespace,
                ctx.uid,
                api.KIND,
                note.reason,
                note.message,
                iso(now),
                secrets.token_hex(6),
                warning=note.warning,
                instance=os.environ.get("HOSTNAME", n.MANAGED_BY),
            )
            try:
                await asyncio.to_thread(self.kube.post_event, event)
            except Exception:
                log.warning("run %s/%s: could not post event %s", ctx.namespace, ctx.name, note.reason, exc_info=True)


def _remember(refusals: Refusals, key: str, message: str | None, now: float) -> bool:
    """Keep a refusal for the next passes to report and wait out; a success clears it."""
    if message:
        refusals[key] = (now, message)
        return True
    refusals.pop(key, None)
    return False

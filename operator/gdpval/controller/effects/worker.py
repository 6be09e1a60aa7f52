"""The controller: one asyncio worker per GdpvalRun, the only writer of its run's status.

Watch events only wake a worker. A pass gathers what it needs (`gather`), asks the pure
`reconcile.decide` (in a thread: O(samples), never on the event loop), then applies the plan
(`effects`): ledger, children, status, and Events last,
so an Event never tells of a status that was not written (a terminal status goes before the
children, see `_finish_pass`). Passes of one run are at least
`min_interval` apart: that is the status write rate limit.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gdpval.api.v1alpha1 import POD_DEFAULTS_ENV, GdpvalRunSpec, GdpvalRunStatus, PodDefaults
from gdpval.controller.effects import s3 as s3io
from gdpval.controller.effects.apply import Effects, Spawn
from gdpval.controller.effects.claims import Claimer, PoolPods
from gdpval.controller.effects.fanout import in_background, woken_passes
from gdpval.controller.effects.gather import Gatherer, OpenStorage, indexed
from gdpval.controller.effects.kube import Conflict, Kube
from gdpval.controller.effects.memory import RunMemory
from gdpval.controller.effects.metrics import Metrics
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide import decide
from gdpval.controller.pure.manifests import RunContext
from gdpval.controller.pure.policy import BLOCKED_RETRY_SECONDS, CONFLICT_RETRY_SECONDS, WATCHDOG_SECONDS, error_backoff, report_errors, stalled
from gdpval.controller.pure.status import blocked_status, build_status, legacy_storage, settled_status, transition_notes
from gdpval.controller.pure.workload import Queueing
from gdpval.controller.types import RESYNC_SECONDS, TERMINAL_STATES, Observed, Plan, Tally

log = logging.getLogger("gdpval.operator")
RunKey = tuple[str, str]


@dataclass(frozen=True)
class Defaults:
    """Images and pod defaults used when a run does not name its own (the Helm chart sets them)."""

    agent_image: str | None = None
    sandbox_image: str | None = None
    pod: PodDefaults = field(default_factory=PodDefaults)

    @classmethod
    def from_env(cls, agent_image: str | None = None, sandbox_image: str | None = None) -> Defaults:
        try:
            pod = PodDefaults.model_validate_json(os.environ.get(POD_DEFAULTS_ENV) or "{}")
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise SystemExit(f"${POD_DEFAULTS_ENV} (the chart's podDefaults) is not valid: {problems}") from None
        return cls(agent_image or os.environ.get("GDPVAL_AGENT_IMAGE"), sandbox_image or os.environ.get("GDPVAL_SANDBOX_IMAGE"), pod)


@dataclass
class RunWorker:
    key: RunKey
    body: dict[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    uid: str = ""
    generation: int | None = None
    memory: RunMemory = field(default_factory=RunMemory)
    errors: int = 0

    def reset(self, uid: str) -> None:
        """A recreated run with the same name starts from nothing remembered."""
        self.uid, self.memory = uid, RunMemory()


def tally_of(status: GdpvalRunStatus) -> Tally:
    """Counts of a finished run, from its status (its ledger is no longer read)."""
    return Tally(
        **status.samples.model_dump(),
        input_tokens=status.tokens.input,
        output_tokens=status.tokens.output,
        api_errors=status.model_api_errors,
    )


def _status_of(body: Mapping[str, Any]) -> GdpvalRunStatus:
    try:
        return GdpvalRunStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return GdpvalRunStatus()


class Controller:
    def __init__(
        self,
        kube: Kube,
        defaults: Defaults,
        metrics: Metrics,
        min_interval: float = 1.0,
        concurrency: int = 4,
        open_storage: OpenStorage = s3io.open_output,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        spawn: Spawn = in_background,
        pool_pods: PoolPods = lambda namespace: (),
    ):
        self.defaults = defaults
        self.metrics = metrics
        self.min_interval = min_interval
        self.concurrency = concurrency
        self.clock = clock
        self.monotonic = monotonic
        self.last_pass = monotonic()  # when a pass last ended, or when there were first runs to pass
        self.gatherer = Gatherer(kube, open_storage)
        self.effects = Effects(kube, spawn=spawn, claimer=Claimer(kube, pool_pods))
        self.workers: dict[RunKey, RunWorker] = {}
        self.by_uid: dict[str, RunKey] = {}
        self.pods_index: Mapping[str, Any] = {}
        self.jobs_index: Mapping[str, Any] = {}
        self._slots: asyncio.Semaphore | None = None

    # --- events from kopf ----------------------------------------------------------------------

    def on_run(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata", {})
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":
            self.stop_worker(key)
            return
        worker = self.workers.get(key)
        if worker is None:
            if not self.workers:
                self.last_pass = self.monotonic()  # the watchdog does not count the time without runs
            worker = self.workers[key] = RunWorker(key)
            worker.task = asyncio.create_task(self._loop(worker), name=f"gdpval-run-{key[0]}-{key[1]}")
        if worker.uid != meta.get("uid"):
            self.by_uid.pop(worker.uid, None)
            worker.reset(meta.get("uid", ""))
            self.by_uid[worker.uid] = key
        worker.body = copy.deepcopy(dict(body))
        if worker.generation != meta.get("generation") or meta.get("deletionTimestamp"):
            worker.generation = meta.get("generation")
            worker.wake.set()

    def on_child(self, labels: Mapping[str, str]) -> None:
        key = self.by_uid.get(labels.get(n.L_RUN_UID, ""))
        if key in self.workers:
            self.workers[key].wake.set()

    def stop_worker(self, key: RunKey) -> None:
        worker = self.workers.pop(key, None)
        if worker is None:
            return
        self.by_uid.pop(worker.uid, None)
        self.metrics.forget_run(*key)
        if worker.task:
            worker.task.cancel()

    async def stop(self) -> None:
        tasks = [w.task for w in self.workers.values() if w.task]
        for key in list(self.workers):
            self.stop_worker(key)
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- the worker loop ------------------------------------------------------------------------

    async def _loop(self, worker: RunWorker) -> None:
        await woken_passes(worker.wake, lambda: self.run_pass(worker), self.min_interval)

    async def run_pass(self, worker: RunWorker) -> float:
        """One pass that never raises: failures are logged, retried with backoff, and shown in status."""
        if self._slots is None:
            # Slots go to waiting runs in turn (first come, first served): a big run's next pass queues
            # behind every run already waiting, and MAX_CREATES_PER_PASS keeps each pass short.
            self._slots = asyncio.Semaphore(self.concurrency)
        due = time.monotonic()
        failed = False
        async with self._slots:
            started = time.monotonic()
            try:
                delay = await self.reconcile(worker)
                worker.errors = 0
            except Conflict as exc:
                log.info("run %s/%s: %s; retrying", *worker.key, exc)
                delay = CONFLICT_RETRY_SECONDS
            except Exception as exc:
                failed = True
                worker.errors += 1
                delay = error_backoff(worker.errors)
                log.exception("run %s/%s: reconcile failed; retrying in %.0fs", *worker.key, delay)
                if report_errors(worker.errors):
                    await self._report_error(worker, exc)
        self.metrics.observe_reconcile(time.monotonic() - started, failed, waited=started - due)
        self.last_pass = self.monotonic()
        return delay

    def health(self) -> str | None:
        """Why the operator is unhealthy (for /healthz), or None: runs exist but no pass ends (hung calls)."""
        idle = self.monotonic() - self.last_pass
        if stalled(len(self.workers), self.last_pass, self.monotonic()):
            return f"no reconcile pass ended for {idle:.0f}s (watchdog {WATCHDOG_SECONDS:.0f}s) with {len(self.workers)} runs"
        return None

    async def _report_error(self, worker: RunWorker, exc: Exception) -> None:
        """Repeated failures show in the run's Ready condition instead of only in the operator's log."""
        prev = worker.memory.written or _status_of(worker.body)
        if prev.state in TERMINAL_STATES:
            return
        message = f"the operator keeps failing to reconcile this run ({type(exc).__name__}: {exc}); it retries with backoff"
        generation = worker.body.get("metadata", {}).get("generation", 0)
        try:
            await self.effects.write_status(worker.memory, *worker.key, blocked_status(prev, generation, "ReconcileError", message[:1024], self.clock()))
        except Exception:
            log.warning("run %s/%s: could not report the error in status", *worker.key, exc_info=True)

    # --- one pass -------------------------------------------------------------------------------

    async def reconcile(self, worker: RunWorker) -> float:
        """Gather, decide, apply; the seconds until the next pass is due. Raises what the API raised."""
        meta = worker.body["metadata"]
        if meta.get("deletionTimestamp"):
            return RESYNC_SECONDS
        prev = worker.memory.written or _status_of(worker.body)
        try:
            spec = GdpvalRunSpec.model_validate(worker.body.get("spec") or {})
        except ValidationError as exc:
            problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            status = blocked_status(prev, meta.get("generation", 0), "InvalidSpec", f"fix the spec: {problems}", self.clock())
            await self.effects.write_status(worker.memory, *worker.key, status)
            return RESYNC_SECONDS
        ctx = RunContext(
            meta["name"],
            meta["namespace"],
            meta["uid"],
            spec,
            spec.images.agent or self.defaults.agent_image or "",
            spec.images.sandbox or self.defaults.sandbox_image or "",
            legacy_storage(meta["name"], prev),
            self.defaults.pod,
        )
        obs = Observed(
            now=self.clock(),
            spec=spec,
            generation=meta.get("generation", 0),
            status=prev,
            ledger={},
            pods=worker.memory.seen_go(indexed(self.pods_index, ctx.uid)),
            jobs={j.component: j for j in indexed(self.jobs_index, ctx.uid)},
            queueing=Queueing.of(meta.get("labels")),
        )
        if prev.state in TERMINAL_STATES:
            obs = await self.gatherer.workload(ctx, obs)  # a queued run's Workload is marked Finished
            return await self._finish_pass(worker, ctx, obs, await self._decide(obs), None)
        with self.metrics.phase("gather"):
            obs, ledger_version = await self.gatherer.gather(worker.memory, ctx, obs)
        if ledger_version is None:
            return await self._blocked_pass(worker, ctx, obs)
        return await self._finish_pass(worker, ctx, obs, await self._decide(obs), ledger_version)

    async def _decide(self, obs: Observed) -> Plan:
        with self.metrics.phase("decide"):
            return await asyncio.to_thread(decide, obs)

    async def _blocked_pass(self, worker: RunWorker, ctx: RunContext, obs: Observed) -> float:
        """Nothing is read or changed until the blockers are fixed; status says how."""
        message = "; ".join(b.message for b in obs.blockers)
        status = blocked_status(obs.status, obs.generation, obs.blockers[0].reason, message, obs.now)
        await self.effects.write_status(worker.memory, ctx.namespace, ctx.name, status)
        await self.effects.post(ctx, transition_notes(obs.status, status), obs.now)
        return BLOCKED_RETRY_SECONDS

    async def _finish_pass(self, worker: RunWorker, ctx: RunContext, obs: Observed, plan: Plan, ledger_version: str | None) -> float:
        """The ledger first, then children, then status; Events only once the status is written.

        A terminal status goes before the children: once it is written, no later pass creates a Job,
        so a crash between it and the deletions that end the run cannot bring a deleted Job back.
        """
        with self.metrics.phase("ledger"):
            await self.effects.write_ledger(worker.memory, ctx, obs, plan, ledger_version)
        settled = obs.status.state in TERMINAL_STATES
        status = settled_status(obs.status, obs.generation) if settled else build_status(obs, plan)
        if status.state in TERMINAL_STATES:
            await self.effects.write_status(worker.memory, ctx.namespace, ctx.name, status)
        with self.metrics.phase("apply"):
            if await asyncio.to_thread(self.effects.apply, worker.memory, ctx, plan, obs.now):
                worker.wake.set()  # the next pass reports the refusal in status
            await self.effects.write_workload(ctx, obs, plan)
        with self.metrics.phase("status"):
            await self.effects.write_status(worker.memory, ctx.namespace, ctx.name, status)
        with self.metrics.phase("events"):
            await self.effects.post(ctx, plan.notes + transition_notes(obs.status, status), obs.now)
        held = any(c.type == "ModelUnavailable" and c.status == "True" for c in status.conditions)
        self.metrics.observe_run(ctx.namespace, ctx.name, status.state, tally_of(status) if settled else plan.tally, status.tokens.cost, held)
        return plan.requeue_after(obs.now)  # a finished run's only wake-up is its ttlSecondsAfterFinished

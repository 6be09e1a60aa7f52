"""kopf wiring: watches feed per-run workers; each worker is the only writer of its run's status.

- Pods and Jobs are watched with a server-side label selector (only ours) into kopf indexes,
  which kopf fills before any handler runs, so a restarted operator sees every live pod first.
- Each GdpvalRun gets one asyncio worker. Watch events only wake it; a pass reads the indexes,
  the ledger and S3, asks `reconcile.decide`, applies the plan, and writes status if it changed.
  Passes run at most once per `min_interval` per run: that is the status write rate limit.
- Every blocking call (kubernetes client, boto3) runs in a thread, never on the event loop.
- No finalizer is ever added (no on.delete, daemons or timers): children go with the run
  through ownerReferences, and a run can be deleted while the operator is down.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import kopf
from aiohttp import web
from pydantic import ValidationError

from gdpval.controller import api, manifests, s3io
from gdpval.controller import names as n
from gdpval.controller.api import GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.kube import Conflict, Kube, load_config
from gdpval.controller.ledger import Ledger, decode, encode
from gdpval.controller.manifests import RunContext
from gdpval.controller.metrics import Metrics
from gdpval.controller.observe import JobView, PodView, iso, parse_job, parse_pod
from gdpval.controller.policy import BLOCKED_RETRY_SECONDS, CONFLICT_RETRY_SECONDS, error_backoff, job_error_current, report_errors
from gdpval.controller.reconcile import (
    RESYNC_SECONDS,
    TERMINAL_STATES,
    Blocker,
    Note,
    Observed,
    Plan,
    Probe,
    Tally,
    decide,
    needed_probes,
)
from gdpval.controller.status import blocked_status, build_status, settled_status, status_patch, transition_notes
from gdpval.storage import NotFound, StorageError

log = logging.getLogger("gdpval.operator")
RunKey = tuple[str, str]


@dataclass(frozen=True)
class Defaults:
    """Images used when a run does not name its own (the Helm chart sets them)."""

    agent_image: str | None = None
    sandbox_image: str | None = None

    @classmethod
    def from_env(cls, agent_image: str | None = None, sandbox_image: str | None = None) -> "Defaults":
        return cls(agent_image or os.environ.get("GDPVAL_AGENT_IMAGE"), sandbox_image or os.environ.get("GDPVAL_SANDBOX_IMAGE"))


@dataclass
class RunWorker:
    key: RunKey
    body: dict[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None
    uid: str = ""
    generation: int | None = None
    samples: tuple[str, ...] | None = None
    revision: str | None = None
    create_failures: dict[str, tuple[float, str]] = field(default_factory=dict)
    job_errors: dict[str, tuple[float, str]] = field(default_factory=dict)
    written: GdpvalRunStatus | None = None
    network_policy: bool = False
    storage: Any = None
    storage_key: tuple | None = None
    errors: int = 0

    def reset(self, uid: str) -> None:
        """A recreated run with the same name starts from nothing cached."""
        self.uid, self.samples, self.revision, self.written, self.network_policy = uid, None, None, None, False
        self.create_failures.clear()
        self.job_errors.clear()


def tally_of(status: GdpvalRunStatus) -> Tally:
    """Counts of a finished run, from its status (its ledger is no longer read)."""
    s = status.samples
    return Tally(
        total=s.total, pending=s.pending, running=s.running, succeeded=s.succeeded, failed=s.failed, retried=s.retried,
        input_tokens=status.tokens.input, output_tokens=status.tokens.output, api_errors=status.model_api_errors,
    )


def _status_of(body: Mapping[str, Any]) -> GdpvalRunStatus:
    try:
        return GdpvalRunStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return GdpvalRunStatus()


class Controller:
    def __init__(self, kube: Kube, defaults: Defaults, metrics: Metrics, min_interval: float = 1.0, concurrency: int = 4):
        self.kube = kube
        self.defaults = defaults
        self.metrics = metrics
        self.min_interval = min_interval
        self.concurrency = concurrency
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
        delay = 0.0
        while True:
            try:
                await asyncio.wait_for(worker.wake.wait(), timeout=delay)
            except TimeoutError:
                pass
            worker.wake.clear()
            delay = await self._pass(worker)
            await asyncio.sleep(self.min_interval)

    async def _pass(self, worker: RunWorker) -> float:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        started = time.monotonic()
        failed = False
        async with self._slots:
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
        self.metrics.observe_reconcile(time.monotonic() - started, failed)
        return delay

    async def _report_error(self, worker: RunWorker, exc: Exception) -> None:
        """Repeated failures show in the run's Ready condition instead of only in the operator's log."""
        prev = worker.written or _status_of(worker.body)
        if prev.state in TERMINAL_STATES:
            return
        message = f"the operator keeps failing to reconcile this run ({type(exc).__name__}: {exc}); it retries with backoff"
        generation = worker.body.get("metadata", {}).get("generation", 0)
        try:
            await self._write_status(worker, blocked_status(prev, generation, "ReconcileError", message[:1024], time.time()))
        except Exception:
            log.warning("run %s/%s: could not report the error in status", *worker.key, exc_info=True)

    # --- one pass -------------------------------------------------------------------------------

    async def reconcile(self, worker: RunWorker) -> float:
        body = worker.body
        meta = body["metadata"]
        if meta.get("deletionTimestamp"):
            return RESYNC_SECONDS
        prev = worker.written or _status_of(body)
        try:
            spec = GdpvalRunSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            problems = "; ".join(f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
            await self._write_status(worker, blocked_status(prev, meta.get("generation", 0), "InvalidSpec", f"fix the spec: {problems}", time.time()))
            return RESYNC_SECONDS
        ctx = RunContext(
            meta["name"], meta["namespace"], meta["uid"], spec,
            spec.images.agent or self.defaults.agent_image or "", spec.images.sandbox or self.defaults.sandbox_image or "",
        )
        obs = Observed(
            now=time.time(), spec=spec, generation=meta.get("generation", 0), status=prev, ledger={},
            pods=self._indexed(self.pods_index, ctx.uid), jobs={j.component: j for j in self._indexed(self.jobs_index, ctx.uid)},
        )
        if prev.state in TERMINAL_STATES:
            return await self._finish_pass(worker, ctx, obs, decide(obs), None)
        obs, ledger_version = await self._observe(worker, ctx, obs)
        if ledger_version is None:
            message = "; ".join(b.message for b in obs.blockers)
            status = blocked_status(prev, obs.generation, obs.blockers[0].reason, message, obs.now)
            await self._post(ctx, transition_notes(prev, status), obs.now)
            await self._write_status(worker, status)
            return BLOCKED_RETRY_SECONDS
        return await self._finish_pass(worker, ctx, obs, decide(obs), ledger_version)

    async def _observe(self, worker: RunWorker, ctx: RunContext, obs: Observed) -> tuple[Observed, str | None]:
        """Everything beyond the indexes: Secrets, ledger, manifest, commit markers, submission."""
        blockers = list(self._static_blockers(worker, ctx, obs.now))
        check = await asyncio.to_thread(self.kube.check_secrets, ctx.namespace, ctx.spec)
        blockers += check.blockers
        if ctx.spec.output.credentials_secret and check.s3_credentials is None:
            return replace(obs, blockers=tuple(blockers)), None
        storage = self._storage(worker, ctx, check.s3_credentials)
        try:
            ledger, version = await asyncio.to_thread(self._load_ledger, ctx, storage, obs.now)
            obs = replace(obs, ledger=ledger, blockers=tuple(blockers))
            obs = await self._load_samples(worker, ctx, storage, obs)
            probes = await asyncio.to_thread(self._probes, ctx, storage, obs)
            obs = replace(obs, probes=probes, create_failures=dict(worker.create_failures))
            return await self._load_submission(ctx, storage, obs), version
        except StorageError as exc:
            blockers.append(Blocker("StorageUnavailable", f"{ctx.spec.output.url}: {exc}"))
            return replace(obs, blockers=tuple(blockers)), None

    def _static_blockers(self, worker: RunWorker, ctx: RunContext, now: float) -> list[Blocker]:
        out = []
        if not ctx.agent_image or not ctx.sandbox_image:
            out.append(Blocker("ImageNotSet", "set spec.images.agent and spec.images.sandbox, or give the operator default images"))
        for component, (when, message) in list(worker.job_errors.items()):
            if job_error_current(when, now):
                out.append(Blocker("JobCreateFailed", f"the {component} Job was refused: {message}"))
        return out

    def _storage(self, worker: RunWorker, ctx: RunContext, creds: dict[str, str] | None):
        key = (ctx.spec.output.model_dump_json(), tuple(sorted((creds or {}).items())))
        if worker.storage_key != key:
            worker.storage, worker.storage_key = s3io.open_output(ctx.spec.output, creds), key
        return worker.storage

    def _load_ledger(self, ctx: RunContext, storage, now: float) -> tuple[Ledger, str]:
        name = n.ledger_name(ctx.name)
        found = self.kube.read_ledger(ctx.namespace, name, ctx.uid)
        if found is not None:
            return decode(found[0]), found[1]
        ledger = s3io.rebuild_ledger(storage, ctx.name, now) if s3io.is_prepared(storage, ctx.name) else {}
        version = self.kube.create_ledger(manifests.ledger_configmap(ctx, encode(ledger)))
        if ledger:
            log.info("run %s/%s: ledger rebuilt from S3 with %d samples", ctx.namespace, ctx.name, len(ledger))
        return ledger, version

    async def _load_samples(self, worker: RunWorker, ctx: RunContext, storage, obs: Observed) -> Observed:
        if worker.samples is None:
            prepare = obs.jobs.get(n.COMPONENT_PREPARE)
            if not ((prepare and prepare.succeeded) or obs.status.dataset_revision):
                return obs
            try:
                worker.samples, worker.revision = await asyncio.to_thread(s3io.load_samples, storage, ctx.name)
            except (NotFound, ValidationError, ValueError) as exc:
                return replace(obs, manifest_error=f"the prepare Job finished but the manifest is unreadable: {exc}")
        return replace(obs, samples=worker.samples, dataset_revision=worker.revision)

    def _probes(self, ctx: RunContext, storage, obs: Observed) -> dict[tuple[str, int], Probe]:
        indexed = {(p.sample, p.attempt) for p in obs.pods}
        out = {}
        for sample, attempt in needed_probes(obs):
            exists = (sample, attempt) in indexed or self.kube.pod_exists(ctx.namespace, n.sample_pod_name(ctx.name, sample, attempt))
            out[(sample, attempt)] = s3io.probe(storage, ctx.name, sample, attempt, exists)
        return out

    async def _load_submission(self, ctx: RunContext, storage, obs: Observed) -> Observed:
        job = obs.jobs.get(n.COMPONENT_ASSEMBLE)
        if not (job and job.succeeded):
            return obs
        try:
            return replace(obs, submission=await asyncio.to_thread(s3io.read_submission, storage, ctx.name))
        except (NotFound, ValueError, KeyError) as exc:
            return replace(obs, submission_error=f"the assemble Job finished but submission_info.json is unreadable: {exc}")

    @staticmethod
    def _indexed(index: Mapping[str, Any], uid: str) -> tuple:
        store = index.get(uid) if index else None
        return tuple(store) if store else ()

    # --- effects --------------------------------------------------------------------------------

    async def _finish_pass(self, worker: RunWorker, ctx: RunContext, obs: Observed, plan: Plan, ledger_version: str | None) -> float:
        if ledger_version is not None and plan.ledger != obs.ledger:
            await asyncio.to_thread(self.kube.write_ledger, ctx.namespace, n.ledger_name(ctx.name), encode(plan.ledger), ledger_version)
        await asyncio.to_thread(self._apply, worker, ctx, plan, obs.now)
        settled = obs.status.state in TERMINAL_STATES
        status = settled_status(obs.status, obs.generation) if settled else build_status(obs, plan)
        await self._post(ctx, plan.notes + transition_notes(obs.status, status), obs.now)
        await self._write_status(worker, status)
        self.metrics.observe_run(ctx.namespace, ctx.name, status.state, tally_of(status) if settled else plan.tally)
        return plan.requeue_after(obs.now) if status.state not in TERMINAL_STATES else RESYNC_SECONDS

    def _apply(self, worker: RunWorker, ctx: RunContext, plan: Plan, now: float) -> None:
        """Deletions, then the NetworkPolicy, then creations: the ledger already records them."""
        for name in plan.delete_pods:
            self.kube.delete_pod(ctx.namespace, name)
        for name in plan.delete_jobs:
            self.kube.delete_job(ctx.namespace, name)
        if plan.network_policy and not worker.network_policy:
            self.kube.ensure_network_policy(manifests.network_policy(ctx))
            worker.network_policy = True
        for sample, attempt in plan.create_pods:
            refused = self.kube.create_pod(manifests.sample_pod(ctx, sample, attempt, secrets.token_urlsafe(32)))
            if refused:
                worker.create_failures[sample] = (now, refused)
                worker.wake.set()  # the next pass reports it in the Running condition
                plan.notes.append(Note("CreateFailed", f"pod for {sample} attempt {attempt} refused: {refused}", warning=True))
            else:
                worker.create_failures.pop(sample, None)
        builders = {n.COMPONENT_PREPARE: manifests.prepare_job, n.COMPONENT_ASSEMBLE: manifests.assemble_job}
        for component in plan.create_jobs:
            refused = self.kube.create_job(builders[component](ctx))
            if refused:
                worker.job_errors[component] = (now, refused)
                worker.wake.set()
            else:
                worker.job_errors.pop(component, None)

    async def _post(self, ctx: RunContext, notes: list[Note], now: float) -> None:
        for note in notes:
            event = manifests.event(
                ctx.name, ctx.namespace, ctx.uid, api.KIND, note.reason, note.message, iso(now), secrets.token_hex(6),
                warning=note.warning, instance=os.environ.get("HOSTNAME", n.MANAGED_BY),
            )
            try:
                await asyncio.to_thread(self.kube.post_event, event)
            except Exception:  # an Event is best effort; the status says the same
                log.warning("run %s/%s: could not post event %s", ctx.namespace, ctx.name, note.reason, exc_info=True)

    async def _write_status(self, worker: RunWorker, status: GdpvalRunStatus) -> None:
        """Write only on change; the worker's pacing bounds the rate."""
        if worker.written is not None and status_patch(worker.written) == status_patch(status):
            return
        namespace, name = worker.key
        await asyncio.to_thread(self.kube.patch_status, namespace, name, status_patch(status))
        worker.written = status


# --- kopf registration and the process entry point -------------------------------------------


def configure(settings: kopf.OperatorSettings) -> None:
    """Our own storage names, watch timeouts, server-side selection of our pods and Jobs only."""
    settings.persistence.finalizer = n.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=api.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=api.GROUP, key="last-handled-configuration")
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.watching.label_selectors["v1", "pods"] = n.MANAGED_SELECTOR
    settings.watching.label_selectors["batch", "v1", "jobs"] = n.MANAGED_SELECTOR
    settings.posting.enabled = False
    settings.networking.request_timeout = 60


def build_registry(controller: Controller, metrics_port: int | None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    selected = {n.L_MANAGED_BY: n.MANAGED_BY}
    state: dict[str, Any] = {}

    @kopf.index("v1", "pods", labels=selected, id="gdpval_pods", registry=registry)
    def gdpval_pods(body: kopf.Body, labels: Mapping[str, str], **_: Any) -> dict[str, PodView] | None:
        uid = labels.get(n.L_RUN_UID)
        return {uid: parse_pod(body)} if uid else None

    @kopf.index("batch", "v1", "jobs", labels=selected, id="gdpval_jobs", registry=registry)
    def gdpval_jobs(body: kopf.Body, labels: Mapping[str, str], **_: Any) -> dict[str, JobView] | None:
        uid = labels.get(n.L_RUN_UID)
        return {uid: parse_job(body)} if uid else None

    @kopf.on.event("v1", "pods", labels=selected, id="pod_event", registry=registry)
    async def pod_event(labels: Mapping[str, str], **_: Any) -> None:
        controller.on_child(labels)

    @kopf.on.event("batch", "v1", "jobs", labels=selected, id="job_event", registry=registry)
    async def job_event(labels: Mapping[str, str], **_: Any) -> None:
        controller.on_child(labels)

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, id="run_event", registry=registry)
    async def run_event(type: str | None, body: kopf.Body, gdpval_pods: kopf.Index, gdpval_jobs: kopf.Index, **_: Any) -> None:
        controller.pods_index, controller.jobs_index = gdpval_pods, gdpval_jobs
        controller.on_run(type, body)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account or KUBECONFIG, the same way the kubernetes client finds them."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)
        if metrics_port is not None:
            state["metrics"] = await start_metrics(controller.metrics, metrics_port)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.stop()
        if "metrics" in state:
            await state["metrics"].cleanup()

    return registry


async def start_metrics(metrics: Metrics, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    async def render(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/metrics", render)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner


async def serve(
    namespaces: list[str],
    metrics_port: int | None = 8080,
    defaults: Defaults | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    """Run the operator in the current event loop until `stop_flag` is set or a signal arrives."""
    controller = Controller(Kube(load_config()), defaults or Defaults.from_env(), Metrics())
    await kopf.operator(
        registry=build_registry(controller, metrics_port),
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
    )


def run_operator(
    namespaces: list[str],
    metrics_port: int | None = 8080,
    agent_image: str | None = None,
    sandbox_image: str | None = None,
) -> None:
    """`gdpval operator`: watch GdpvalRuns in `namespaces` (all namespaces when empty)."""
    asyncio.run(serve(namespaces, metrics_port, Defaults.from_env(agent_image, sandbox_image)))

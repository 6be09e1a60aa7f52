"""kopf wiring: watches feed the per-run workers of `worker.Controller` and the per-pool ones of `pools.Pools`;
the process entry point.

- Pods and Jobs are watched with a server-side label selector (only ours) into kopf indexes,
  which kopf fills before any handler runs, so a restarted operator sees every live pod first.
- Every blocking call (kubernetes client, boto3) runs in a thread, never on the event loop.
- No finalizer is ever added (no on.delete, daemons or timers): children go with the run
  through ownerReferences, and a run can be deleted while the operator is down.
- With leader election, kopf starts only once this replica holds the Lease and stops when it
  loses it (the process then exits, so its pod restarts as a standby); /healthz and /metrics serve
  from the start, so a standby stays live.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from aiohttp import web

from gdpval.api import v1alpha1 as api
from gdpval.controller.effects.kube import Kube, load_config
from gdpval.controller.effects.leader import Elector, LeaseClient, Timing
from gdpval.controller.effects.metrics import Metrics
from gdpval.controller.effects.pools import Pools
from gdpval.controller.effects.worker import Controller, Defaults
from gdpval.controller.pure import names as n
from gdpval.controller.pure.observe import JobView, PodView, parse_job, parse_pod
from gdpval.controller.pure.pool import PooledView, parse_pooled

log = logging.getLogger("gdpval.operator")


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


def build_registry(controller: Controller, pools: Pools) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    selected = {n.L_MANAGED_BY: n.MANAGED_BY}
    pooled: dict[str, Any] = {**selected, n.L_POOL: kopf.PRESENT}

    @kopf.index("v1", "pods", labels=selected, id="gdpval_pods", registry=registry)
    def gdpval_pods(body: kopf.Body, labels: Mapping[str, str], **_: Any) -> dict[str, PodView] | None:
        uid = labels.get(n.L_RUN_UID)
        return {uid: parse_pod(body)} if uid else None

    @kopf.index("batch", "v1", "jobs", labels=selected, id="gdpval_jobs", registry=registry)
    def gdpval_jobs(body: kopf.Body, labels: Mapping[str, str], **_: Any) -> dict[str, JobView] | None:
        uid = labels.get(n.L_RUN_UID)
        return {uid: parse_job(body)} if uid else None

    @kopf.index("v1", "pods", labels=pooled, id="gdpval_pool_pods", registry=registry)
    def gdpval_pool_pods(body: kopf.Body, namespace: str | None, **_: Any) -> dict[str, PooledView]:
        return {namespace or "": parse_pooled(body)}

    @kopf.on.event("v1", "pods", labels=selected, id="pod_event", registry=registry)
    async def pod_event(labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        controller.on_child(labels)
        if n.L_POOL in labels:
            pools.on_pod(namespace or "", labels)

    @kopf.on.event("batch", "v1", "jobs", labels=selected, id="job_event", registry=registry)
    async def job_event(labels: Mapping[str, str], **_: Any) -> None:
        controller.on_child(labels)

    @kopf.on.event(api.GROUP, api.VERSION, api.PLURAL, id="run_event", registry=registry)
    async def run_event(type: str, body: kopf.Body, **indexes: Any) -> None:
        """kopf passes every index by name; ours are gdpval_pods, gdpval_jobs and gdpval_pool_pods."""
        controller.pods_index, controller.jobs_index = indexes["gdpval_pods"], indexes["gdpval_jobs"]
        pools.index = indexes["gdpval_pool_pods"]
        controller.on_run(type, body)

    @kopf.on.event(api.GROUP, api.VERSION, api.POOL_PLURAL, id="pool_event", registry=registry)
    async def pool_event(type: str, body: kopf.Body, **indexes: Any) -> None:
        pools.index = indexes["gdpval_pool_pods"]
        pools.on_pool(type, body)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In-cluster service account or KUBECONFIG, the same way the kubernetes client finds them."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.stop()
        await pools.stop()

    return registry


async def start_metrics(metrics: Metrics, port: int, host: str = "0.0.0.0", health: Callable[[], str | None] = lambda: None) -> web.AppRunner:
    """/metrics, and /healthz that fails (503) while `health` names a problem (the reconcile watchdog)."""

    async def render(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    async def healthz(_: web.Request) -> web.Response:
        problem = health()
        return web.Response(text="ok") if problem is None else web.Response(status=503, text=problem)

    app = web.Application()
    app.router.add_get("/metrics", render)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("metrics on http://%s:%d/metrics", host, port)
    return runner


@dataclass(frozen=True)
class LeaderElection:
    """Where the Lease lives and who this replica is (the pod name in a cluster)."""

    namespace: str
    name: str = "gdpval-operator"
    identity: str = ""
    timing: Timing = Timing()

    @classmethod
    def of(cls, namespace: str | None, name: str) -> LeaderElection:
        """The Lease's namespace: the option, else the pod's own ($POD_NAMESPACE, set by the chart)."""
        where = namespace or os.environ.get("POD_NAMESPACE") or ""
        if not where:
            raise SystemExit("--leader-elect needs --lease-namespace (or $POD_NAMESPACE)")
        return cls(where, name, os.environ.get("HOSTNAME") or socket.gethostname())


class LostLeadership(Exception):
    """The Lease went to another replica: this one stopped acting and exits."""


async def serve(
    namespaces: list[str],
    metrics_port: int | None = 8080,
    defaults: Defaults | None = None,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    election: LeaderElection | None = None,
) -> None:
    """Run the operator in the current event loop until `stop_flag` is set or a signal arrives.

    With `election`, reconciling starts once this replica leads and ends if it stops leading
    (`LostLeadership`); a clean stop hands the Lease over.
    """
    api_client = load_config()
    defaults = defaults or Defaults.from_env()
    kube = Kube(api_client)
    pools = Pools(kube, (defaults.agent_image, defaults.sandbox_image), defaults.pod)
    controller = Controller(kube, defaults, Metrics(), pool_pods=pools.pods)
    stop = stop_flag or asyncio.Event()
    web_runner = await start_metrics(controller.metrics, metrics_port, health=controller.health) if metrics_port is not None else None
    elector = Elector(LeaseClient(api_client, election.namespace, election.name), election.identity, election.timing) if election else None
    lost, keeper = asyncio.Event(), None
    try:
        if elector is not None:
            if not await elector.acquire(stop):
                return
            keeper = asyncio.create_task(elector.keep(lost, stop))
        await kopf.operator(
            registry=build_registry(controller, pools),
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            stop_flag=_either(stop, lost),
            ready_flag=ready_flag,
        )
    finally:
        if keeper is not None:
            keeper.cancel()
        if elector is not None and not lost.is_set():
            await elector.release()
        if web_runner is not None:
            await web_runner.cleanup()
    if lost.is_set():
        raise LostLeadership(f"{election.identity if election else ''} lost the Lease")


def _either(*events: asyncio.Event) -> asyncio.Future:
    """A future kopf can stop on, done once any of `events` is set."""
    done = asyncio.get_running_loop().create_future()

    async def watch(event: asyncio.Event) -> None:
        await event.wait()
        if not done.done():
            done.set_result(None)

    tasks = [asyncio.create_task(watch(e)) for e in events]
    done.add_done_callback(lambda _: [t.cancel() for t in tasks])
    return done


def run_operator(
    namespaces: list[str],
    metrics_port: int | None = 8080,
    agent_image: str | None = None,
    sandbox_image: str | None = None,
    election: LeaderElection | None = None,
) -> None:
    """`gdpval operator`: watch GdpvalRuns in `namespaces` (all namespaces when empty)."""
    try:
        asyncio.run(serve(namespaces, metrics_port, Defaults.from_env(agent_image, sandbox_image), election=election))
    except LostLeadership as exc:
        log.error("%s; exiting so that this replica restarts as a standby", exc)
        raise SystemExit(1) from None

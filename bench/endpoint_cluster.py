"""The endpoint benchmarks of bench/endpoint.py on the real cluster (issue 20): GdpvalRuns whose sample
pods call `gdpval fake-model` on the node address, with its fault injection, in real time.

  outage: one run whose endpoint answers 503 to everything for SECONDS after its AFTER-th chat call.
      Reports wall time, pods created, pods that ended held (exit 75), the most attempts held at once,
      when condition ModelUnavailable was set and cleared, and the attempts committed per sample.
  ratelimit: the endpoint answers 429 to a chat call arriving while N others are in flight. Runs with
      `parallelism P` (P > N: status.window adapts) and `parallelism N` alternate, ROUNDS of each, over
      the same samples and server. Reports wall times, 429s, status.window over time and the calls in
      flight at the server.

Uses the cluster as the tests do (brought up if it is down, never stopped, under the users' shared
lock), its own namespace, MinIO and operator process, all removed at the end.

Usage: .venv/bin/python bench/endpoint_cluster.py outage [--seconds 600] [--after 100] [--samples 50]
       .venv/bin/python bench/endpoint_cluster.py ratelimit [--n 3] [--parallelism 12] [--rounds 2]
       either with [--images AGENT SANDBOX]: already imported images instead of building this tree's
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench.standin import watch_forever  # noqa: E402
from kubernetes import client, config  # noqa: E402

from conftest import ClusterUsers  # noqa: E402
from gdpval.api.v1alpha1 import GROUP, PLURAL, VERSION  # noqa: E402
from gdpval.contract import EXIT_MODEL_UNAVAILABLE  # noqa: E402
from gdpval.controller.pure import names as n  # noqa: E402
from gdpval.fakemodel.server import FakeModelServer, start_background  # noqa: E402
from infra import cluster as local_cluster  # noqa: E402
from infra.minio import MinioServer  # noqa: E402
from support.operator import OperatorNamespace, operator_namespace, result_keys, run_folder  # noqa: E402
from support.standins import make_standin_dataset, sample_dataset_path  # noqa: E402

TASKS = 12  # the sample dataset's
# The prepare and assemble Jobs ask for some CPU: without a request they are BestEffort (cgroup v1
# cpu.shares 2), and on this shared 2-core node another engineer's busy run starved a prepare Job for
# over 10 minutes with 1 s of CPU used.
JOBS = {"resources": {"jobs": {"requests": {"cpu": "200m"}}}}


@dataclass
class Timeline:
    """What the run's status and its sample pods showed, second by second (since `start`)."""

    start: float = field(default_factory=time.monotonic)
    window: list[tuple[float, int | None, int]] = field(default_factory=list)  # (s, status.window, pods running)
    unavailable: list[tuple[float, bool, str]] = field(default_factory=list)  # ModelUnavailable transitions
    pods: set[str] = field(default_factory=set)
    held_pods: set[str] = field(default_factory=set)  # ended with EXIT_MODEL_UNAVAILABLE
    running: set[str] = field(default_factory=set)
    first_pod: float | None = None  # the samples' phase: first sample pod seen -> last one ended
    last_end: float | None = None
    max_held: int = 0  # the most attempts the ModelUnavailable message reported held at once

    def now(self) -> float:
        return round(time.monotonic() - self.start, 1)

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta.get("labels", {}).get(n.L_COMPONENT) != n.COMPONENT_SAMPLE:
            return
        name = meta["name"] + "@" + meta["uid"]  # a held attempt's next pod has the same name
        self.pods.add(name)
        if self.first_pod is None:
            self.first_pod = self.now()
        phase = (pod.get("status") or {}).get("phase")
        if kind != "DELETED" and phase in ("Pending", "Running"):
            self.running.add(name)
        elif name in self.running:
            self.running.discard(name)
            self.last_end = self.now()
        for state in (pod.get("status") or {}).get("containerStatuses") or ():
            if (state.get("state", {}).get("terminated") or {}).get("exitCode") == EXIT_MODEL_UNAVAILABLE:
                self.held_pods.add(name)

    def on_status(self, status: dict[str, Any]) -> None:
        t = self.now()
        self.window.append((t, status.get("window"), len(self.running)))
        cond = next((c for c in status.get("conditions", ()) if c["type"] == "ModelUnavailable"), None)
        on = bool(cond and cond.get("status") == "True")
        message = (cond or {}).get("message", "")
        if not self.unavailable or self.unavailable[-1][1] != on:
            self.unavailable.append((t, on, message))
        if on and " attempt(s) held" in message:
            self.max_held = max(self.max_held, int(message.split(" attempt(s) held")[0].rsplit(" ", 1)[-1]))


@contextmanager
def bench_namespace(workdir: Path, images: tuple[str, str] | None) -> Iterator[tuple[Any, OperatorNamespace]]:
    """The cluster (node address), and a namespace with MinIO, the standin dataset and the operator;
    `images` (already imported) instead of this tree's, which are built and imported when missing."""
    users = ClusterUsers()
    try:
        cluster = local_cluster.bring_up(images=not images)
        dataset = make_standin_dataset(sample_dataset_path(), workdir / "dataset")
        (workdir / "operator").mkdir()
        with (
            MinioServer(host=cluster.node_ip) as minio,
            operator_namespace(cluster, minio, "gdpval-bench-endpoint", dataset, workdir / "operator", images) as ns,
        ):
            yield cluster, ns
    finally:
        users.release()


def one_run(ns: OperatorNamespace, name: str, model: FakeModelServer, timeout: int, **spec: Any) -> dict[str, Any]:
    """Apply a run, follow it until it finishes, and return its figures."""
    timeline, stop = Timeline(), threading.Event()
    api = config.new_client_from_config(ns.kube.kubeconfig)
    core = client.CoreV1Api(api)
    selector = f"{n.L_RUN}={name}"
    watcher = threading.Thread(
        target=watch_forever, args=(core.list_namespaced_pod, timeline.on_pod, stop), kwargs={"namespace": ns.kube.namespace, "label_selector": selector}
    )
    in_flight: list[int] = []
    sampler = threading.Thread(target=_sample_in_flight, args=(model, stop, in_flight))
    before = model.stats()
    watcher.start()
    sampler.start()
    ns.kube.apply(ns.manifest(name, model.base_url, pod=JOBS, **spec))
    try:
        status = _follow(ns, client.CustomObjectsApi(api), name, timeline, timeout)
        wall = timeline.now()
    finally:
        stop.set()
        watcher.join()
        sampler.join()
    after = model.stats()
    committed = result_keys(ns.client, ns.bucket, "out", run_folder(status)) if status.get("storageURI") else {}
    middle = in_flight[len(in_flight) // 4 : 3 * len(in_flight) // 4] or [0]
    return {
        "name": name,
        "state": status.get("state"),
        "wall_s": wall,
        "samples_phase_s": round((timeline.last_end or 0) - (timeline.first_pod or 0), 1),
        "samples": status.get("samples"),
        "committed_attempts": sorted({attempt for attempts in committed.values() for attempt, _ in attempts}),
        "committed_per_sample": sorted({len(attempts) for attempts in committed.values()}),
        "pods_created": len(timeline.pods),
        "pods_held": len(timeline.held_pods),
        "max_attempts_held": timeline.max_held,
        "model_unavailable": [(t, on) for t, on, _ in timeline.unavailable],
        "completions": after["completions"] - before["completions"],
        "statuses": {code: after["statuses"].get(code, 0) - before["statuses"].get(code, 0) for code in after["statuses"]},
        "in_flight_mean": round(statistics.fmean(middle), 2),
        "in_flight_median": statistics.median(middle),
        "window": _changes(timeline.window),
    }


def _follow(ns: OperatorNamespace, api: client.CustomObjectsApi, name: str, timeline: Timeline, timeout: int) -> dict[str, Any]:
    """Read the run's status every second until it is Finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.get_namespaced_custom_object(GROUP, VERSION, ns.kube.namespace, PLURAL, name).get("status") or {}
        timeline.on_status(status)
        if any(c["type"] == "Finished" and c["status"] == "True" for c in status.get("conditions", ())):
            return status
        time.sleep(1)
    raise RuntimeError(f"{name} did not finish in {timeout} s: {ns.kube.run_status(name)}\n--- operator log ---\n{ns.operator.logs()[-3000:]}")


def _sample_in_flight(model: FakeModelServer, stop: threading.Event, out: list[int]) -> None:
    while not stop.wait(0.1):
        out.append(model.stats()["in_flight"])


def _changes(series: list[tuple[float, int | None, int]]) -> list[tuple[float, int | None, int]]:
    """Only the points where status.window or the pods running changed."""
    return [point for i, point in enumerate(series) if i == 0 or point[1:] != series[i - 1][1:]]


def outage(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    with bench_namespace(workdir, args.images) as (cluster, ns):
        spec = {"parallelism": args.parallelism, "selection": {"limit": 10, "repeats": max(1, args.samples // 10)}, "samples": {"retries": 0}}
        with start_background(host=cluster.node_ip, port=0, outage_after=args.after, outage_seconds=args.seconds, latency=args.latency) as model:
            result = one_run(ns, "outage", model, args.timeout, **spec)
    return {"outage_s": args.seconds, "after_calls": args.after, "latency_s": args.latency, "parallelism": args.parallelism, **result}


def ratelimit(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with bench_namespace(workdir, args.images) as (cluster, ns):
        with start_background(host=cluster.node_ip, port=0, max_concurrent=args.n, latency=args.latency, retry_after=0.5) as model:
            for i in range(args.rounds):
                for parallelism in (args.parallelism, args.n):
                    spec = {"parallelism": parallelism, "selection": {"repeats": args.repeats}}
                    runs.append({"parallelism": parallelism, **one_run(ns, f"rl-{i}-p{parallelism}", model, args.timeout, **spec)})
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)  # each run's figures as it ends
    adaptive = [r["wall_s"] for r in runs if r["parallelism"] == args.parallelism]
    fixed = [r["wall_s"] for r in runs if r["parallelism"] == args.n]
    ratio = round(statistics.fmean(adaptive) / statistics.fmean(fixed), 2)
    return {"n": args.n, "latency_s": args.latency, "samples": TASKS * args.repeats, "adaptive_over_fixed_wall": ratio, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    out = sub.add_parser("outage")
    out.add_argument("--seconds", type=float, default=600)
    out.add_argument("--after", type=int, default=100, help="chat calls served before the outage")
    out.add_argument("--samples", type=int, default=50)
    out.add_argument("--parallelism", type=int, default=5)
    out.add_argument("--latency", type=float, default=1.0)
    out.add_argument("--timeout", type=int, default=3600)
    rl = sub.add_parser("ratelimit")
    rl.add_argument("--n", type=int, default=3)
    rl.add_argument("--parallelism", type=int, default=12)
    rl.add_argument("--repeats", type=int, default=3)
    rl.add_argument("--rounds", type=int, default=2)
    rl.add_argument("--latency", type=float, default=1.0)
    rl.add_argument("--timeout", type=int, default=1800)
    for command in (out, rl):
        command.add_argument("--images", nargs=2, metavar=("AGENT", "SANDBOX"), type=str, help="imported image refs to run instead of building this tree's")
    args = parser.parse_args()
    args.images = tuple(args.images) if args.images else None
    with tempfile.TemporaryDirectory(prefix="gdpval-bench-endpoint-") as tmp:
        figures = outage(args, Path(tmp)) if args.what == "outage" else ratelimit(args, Path(tmp))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

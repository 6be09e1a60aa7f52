"""Sample pod created -> first model request, on the real local cluster (hack/README.md).

One GdpvalRun over the 12-task sample (repeated to reach --samples) with the project images already
imported and the reference files staged from MinIO by the pod's init container, the operator as a
process, the scripted fake model behind a recorder. The recorder forwards every connection and notes
when each pod IP first connects; a pod's figure is that time minus when its ADDED event arrived.
Uses the cluster as the tests do: brought up if it is down (never stopped), under the users' shared lock.

Usage: .venv/bin/python bench/pod_startup.py --samples 50 [--parallelism 5] [--ahead N] [--pool N [--pool-starting M]] [--images AGENT SANDBOX] [--floor] --json

`--ahead N` runs the run twice in one invocation (same cluster, MinIO, model and images), first as is,
then with `spec.samples.startAhead: N`: a pod started ahead of its turn is timed from its go (the watch
event that shows the operator's go annotation) to its first model request (its steps add when the watch
first showed it Ready, its agent waiting), a pod created straight into the window from its creation as
before; `first_window` gives each run's first `--parallelism` pods from their creation (or claim), step by
step (with startAhead they too wait for a go), the paths side by side. `--images` runs given, already
imported images instead of building this tree's (a before/after pair side by side); `--floor` measures Kubernetes' own part
instead: trivial pods (the sandbox image's bash opening one connection to the recorder) created -> that
connection, in waves of `--parallelism`. `--pool N` adds a path in which a GdpvalPool of N pods is made ready
first, then two runs of `--samples` run back to back claiming from it: a claimed pod counts from the watch event
that shows its claim, a pod the run had to create beside the pool (none free) from its creation; `--pool-starting M`
adds the same path with the pool's refill paced to M pods starting at once (`spec.maxStarting`).
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import socket
import socketserver
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench import measure  # noqa: E402
from bench.standin import watch_forever  # noqa: E402
from kubernetes import client, config  # noqa: E402

from conftest import ClusterUsers  # noqa: E402
from gdpval.controller.pure import manifests  # noqa: E402
from gdpval.controller.pure import names as n  # noqa: E402
from gdpval.fakemodel.server import start_background  # noqa: E402
from infra import cluster as local_cluster  # noqa: E402
from infra.minio import MinioServer  # noqa: E402
from support.operator import Kube, OperatorProcess, install_crd, pool_manifest, restricted_namespace, run_manifest, upload_tree  # noqa: E402
from support.standins import make_standin_dataset, sample_dataset_path  # noqa: E402

SAMPLE_TASKS = 12
SLOW_GO_S = 2.0  # a pod started ahead this long from its go to its first request is listed with its steps
POOL_KEY = "__pool"  # in a path's spec.samples overrides: the pool's spec (taken out before the run's spec)


class Recorder(socketserver.ThreadingTCPServer):
    """A TCP forwarder to the model that notes each connection's client IP and arrival time."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, upstream: tuple[str, int]):
        self.upstream = upstream
        self.connections: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        super().__init__((host, 0), _Forward)

    def first_after(self, ip: str, since: float) -> float | None:
        with self.lock:
            return min((t for t, peer in self.connections if peer == ip and t >= since), default=None)


class _Forward(socketserver.BaseRequestHandler):
    server: Recorder

    def handle(self) -> None:
        with self.server.lock:
            self.server.connections.append((time.time(), self.client_address[0]))
        with socket.create_connection(self.server.upstream) as upstream:
            back = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
            back.start()
            _pump(self.request, upstream)
            back.join()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class PodsSeen:
    """When each sample pod's ADDED event arrived (wall clock, as the pods' own timestamps), for a pod
    started ahead the event that first showed its go, its IP once it has one, and its last status."""

    def __init__(self) -> None:
        self.added: dict[str, float] = {}
        self.ahead: set[str] = set()
        self.went: dict[str, float] = {}
        self.ready: dict[str, float] = {}  # a pod started ahead: when the watch first showed it Ready (its agent waits)
        self.ips: dict[str, str] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self.pooled: set[str] = set()  # pods claimed from a pool: they count from the event that shows the claim

    def start(self, pod: str) -> float:
        """Where the sample's start counts from: its go if the pod was started ahead, else its creation."""
        return self.went.get(pod, self.added[pod])

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        if meta.get("labels", {}).get(n.L_COMPONENT) != n.COMPONENT_SAMPLE:
            return
        self.added.setdefault(meta["name"], time.time())
        if n.L_POOL in meta.get("labels", {}):
            self.pooled.add(meta["name"])
        go = (meta.get("annotations") or {}).get(n.A_GO)
        if go == "":
            self.ahead.add(meta["name"])
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or []):
                self.ready.setdefault(meta["name"], time.time())
        elif go is not None and meta["name"] in self.ahead:
            self.went.setdefault(meta["name"], time.time())
        if kind != "DELETED":
            self.last[meta["name"]] = pod
        ip = (pod.get("status") or {}).get("podIP")
        if ip:
            self.ips[meta["name"]] = ip


def steps(marks: list[dict[str, float]]) -> dict[str, float | None]:
    """The median second after creation at which pods reached each step of their start."""
    names = dict.fromkeys(step for mark in marks for step in mark)
    return {step: round(measure.percentile([m[step] for m in marks if step in m], 50) or 0.0, 3) for step in names}


def selection(samples: int) -> tuple[int, int]:
    """(limit, repeats) over the 12-task sample giving at least `samples` samples."""
    repeats = math.ceil(samples / SAMPLE_TASKS)
    return math.ceil(samples / repeats), repeats


def floor_pod(name: str, image: str, target: tuple[str, int]) -> dict[str, Any]:
    """A pod doing nothing but open one connection to the recorder, under the sample pods' security."""
    labels = {n.L_MANAGED_BY: n.MANAGED_BY, n.L_COMPONENT: n.COMPONENT_SAMPLE}
    container = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", "-c", f"exec 3<>/dev/tcp/{target[0]}/{target[1]}"],
        "securityContext": {**manifests.CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }
    spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False}
    spec |= {"securityContext": dict(manifests.POD_SECURITY), "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def run_floor(core: client.CoreV1Api, namespace: str, image: str, target: tuple[str, int], args: argparse.Namespace) -> None:
    """`--samples` trivial pods, `--parallelism` at a time, each wave waited for and deleted."""
    for wave in range(0, args.samples, args.parallelism):
        names = [f"floor-{i}" for i in range(wave, min(wave + args.parallelism, args.samples))]
        for name in names:
            core.create_namespaced_pod(namespace, floor_pod(name, image, target))
        deadline = time.monotonic() + args.timeout
        while any(core.read_namespaced_pod(name, namespace).status.phase not in ("Succeeded", "Failed") for name in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"floor pods {names} did not finish in {args.timeout} s")
            time.sleep(0.2)
        for name in names:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One run per start path (as is; then, with `--ahead`, with pods started ahead), each in its own namespace."""
    users = ClusterUsers()
    try:
        cluster = local_cluster.bring_up(images=not args.images)
        images = tuple(args.images) if args.images else (cluster.images["operator"], cluster.images["sandbox-slim"])
        paths: dict[str, dict[str, Any]] = {} if args.ahead_only else {"as is": {}}
        if args.ahead:
            paths[f"startAhead {args.ahead}"] = {"startAhead": args.ahead}
        if args.pool:
            paths[f"pool {args.pool}"] = {POOL_KEY: {"size": args.pool}}
            for bound in args.pool_starting:
                paths[f"pool {args.pool}, maxStarting {bound}"] = {POOL_KEY: {"size": args.pool, "maxStarting": bound}}
        with MinioServer(host=cluster.node_ip) as minio, start_background() as model:
            recorder = Recorder(cluster.node_ip, ("127.0.0.1", model.port))
            threading.Thread(target=recorder.serve_forever, daemon=True).start()
            bucket = "bench"
            minio.client().create_bucket(Bucket=bucket)
            upload_tree(minio.client(), bucket, "dataset", make_standin_dataset(sample_dataset_path(), workdir / "dataset"))
            try:
                reports = {
                    label: one_path(args, cluster, minio, recorder, bucket, images, extra, workdir / str(i)) for i, (label, extra) in enumerate(paths.items())
                }
            finally:
                recorder.shutdown()
    finally:
        users.release()
    return reports if len(reports) > 1 else reports["as is"]


def one_path(
    args: argparse.Namespace, cluster: Any, minio: MinioServer, recorder: Recorder, bucket: str, images: tuple[str, ...], samples: dict[str, Any], workdir: Path
) -> dict[str, Any]:
    """One run (or the floor's pods) in a fresh restricted namespace, `samples` over the run's spec.samples."""
    namespace = f"gdpval-bench-{secrets.token_hex(3)}"
    kube = Kube(str(cluster.kubeconfig), namespace, cluster.kubectl_path)
    workdir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    install_crd(kube)
    restricted_namespace(kube, minio)
    seen = PodsSeen()
    core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    threading.Thread(
        target=watch_forever,
        args=(core.list_namespaced_pod, seen.on_event, stop),
        kwargs={"namespace": namespace, "label_selector": n.MANAGED_SELECTOR},
        daemon=True,
    ).start()
    if args.floor:
        try:
            run_floor(core, namespace, images[1], (cluster.node_ip, recorder.server_address[1]), args)
        finally:
            stop.set()
            kube.run("delete", "namespace", namespace, "--wait=false", check=False)
        return report(args, seen, recorder, {"state": "floor"}, images)
    operator = OperatorProcess(str(cluster.kubeconfig), namespace, *images, workdir).start()
    pool = samples.pop(POOL_KEY, {})
    try:
        if pool:
            kube.apply(pool_manifest("bench", namespace, images=images, **pool))
            kube.wait_for(lambda: _pool_status(kube).get("ready") == pool["size"], args.timeout, "the pool ready", 0.5)
        names = ["startup-1", "startup-2"] if pool else ["startup"]  # two runs back to back share the pool
        statuses = [_one_run(args, kube, cluster, minio, recorder, bucket, images, samples, name, operator) for name in names]
    finally:
        stop.set()
        operator.stop()
        kube.run("delete", "namespace", namespace, "--wait=false", check=False)
    return report(args, seen, recorder, statuses[-1], images, runs=len(names))


def _pool_status(kube: Kube) -> dict[str, Any]:
    return (kube.get("gdpvalpool", "bench") or {}).get("status") or {}


def _one_run(args, kube, cluster, minio, recorder, bucket, images, samples, name: str, operator) -> dict[str, Any]:
    """A GdpvalRun of `--samples` at `--parallelism`, waited for; its status."""
    limit, repeats = selection(args.samples)
    manifest = run_manifest(
        name,
        kube.namespace,
        model_url=f"http://{cluster.node_ip}:{recorder.server_address[1]}/v1",
        dataset=f"s3://{bucket}/dataset",
        output_url=f"s3://{bucket}/out",
        endpoint=minio.endpoint_url,
        images=images,
        parallelism=args.parallelism,
        selection={"limit": limit, "repeats": repeats},
    )
    manifest["spec"].setdefault("samples", {}).update(samples)
    kube.apply(manifest)
    wait = ["wait", "--for=jsonpath={.status.state}=Succeeded", f"gdpvalrun/{name}", f"--timeout={args.timeout}s"]
    done = kube.run(*wait, check=False, timeout=args.timeout + 30)
    status = kube.run_status(name)
    if done.returncode != 0:
        raise RuntimeError(f"the run did not succeed: {status}\n--- operator log ---\n{operator.logs()[-3000:]}")
    return status


def report(args: argparse.Namespace, seen: PodsSeen, recorder: Recorder, status: dict[str, Any], images: tuple[str, ...], runs: int = 1) -> dict[str, Any]:
    firsts = {pod: first for pod, ip in seen.ips.items() if (first := recorder.first_after(ip, seen.start(pod))) is not None}
    delays = {pod: first - seen.start(pod) for pod, first in firsts.items()}
    slowest = max(delays, key=lambda pod: delays[pod], default=None)
    marks = {pod: _marks(seen, pod, first) for pod, first in firsts.items()}
    ahead = [pod for pod in firsts if pod in seen.went]
    out = {
        "samples": args.samples if args.floor else math.prod(selection(args.samples)) * runs,
        "parallelism": args.parallelism,
        "pods": len(seen.added),
        "measured": len(delays),
        "start_to_first_model_request": _figure(list(delays.values())),  # from the go for a pod started ahead, else from creation
        "steps_p50_s": steps(list(marks.values())),
        "slowest_steps_s": marks[slowest] if slowest else {},  # where the p99 goes
        "run": {"state": status.get("state"), "progress": status.get("progress")},
        "images": {"agent": images[0], "sandbox": images[1]},
    }
    if seen.ahead:
        cold = [pod for pod in firsts if pod not in seen.went]
        ahead_figure = _figure([delays[p] for p in ahead])
        out["started_ahead"] = {"pods": len(ahead), "go_to_first_model_request": ahead_figure, "steps_p50_s": steps([marks[p] for p in ahead])}
        slow = sorted((p for p in ahead if delays[p] > SLOW_GO_S), key=lambda p: -delays[p])
        out["started_ahead"]["slow"] = [{"pod": p, "go_to_first_model_request": round(delays[p], 3), "steps_s": marks[p]} for p in slow]
        out["created_in_window"] = {"pods": len(cold), "created_to_first_model_request": _figure([delays[p] for p in cold])}
    if seen.pooled:
        claimed = [p for p in firsts if p in seen.pooled]
        made = [p for p in firsts if p not in seen.pooled]
        out["claimed"] = {"pods": len(claimed), "claimed_to_first_model_request": _figure([delays[p] for p in claimed])}
        out["created_beside_the_pool"] = {"pods": len(made), "created_to_first_model_request": _figure([delays[p] for p in made])}
    # Each run's first pods: their wait from creation (or claim), step by step, on every path.
    by_run: dict[str, list[str]] = {}
    for pod in sorted(firsts, key=lambda p: seen.added[p]):
        by_run.setdefault(seen.last[pod]["metadata"].get("labels", {}).get(n.L_RUN, ""), []).append(pod)
    first = [pod for pods in by_run.values() for pod in pods[: args.parallelism]]
    out["first_window"] = {
        "pods": len(first),
        "created_to_first_model_request": _figure([firsts[p] - seen.added[p] for p in first]),
        "steps_p50_s": steps([marks[p] for p in first]),
    }
    return out


def _marks(seen: PodsSeen, pod: str, first: float) -> dict[str, float]:
    """The pod's start steps after its creation; a pod started ahead also has when it turned Ready and its go."""
    marks = measure.startup_marks(seen.last[pod], first)
    if pod in seen.ready:
        marks["ready"] = round(seen.ready[pod] - seen.added[pod], 3)
    if pod in seen.went:
        marks["go"] = round(seen.went[pod] - seen.added[pod], 3)
    return marks


def _figure(delays: list[float]) -> dict[str, float]:
    return {
        "p50_s": round(measure.percentile(delays, 50) or 0, 3),
        "p99_s": round(measure.percentile(delays, 99) or 0, 3),
        "max_s": round(max(delays, default=0), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--parallelism", type=int, default=5, help="spec.parallelism: sample pods starting at once")
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--images", nargs=2, metavar=("AGENT", "SANDBOX"), help="imported image refs to run instead of building this tree's")
    parser.add_argument("--ahead", type=int, default=0, help="also run with spec.samples.startAhead N, a pod started ahead timed from its go")
    parser.add_argument("--ahead-only", action="store_true", help="with --ahead: only the run with pods started ahead")
    parser.add_argument("--pool", type=int, default=0, help="also run two runs back to back claiming from a GdpvalPool of size N")
    parser.add_argument(
        "--pool-starting", type=int, action="append", default=[], metavar="M", help="with --pool: also a pool path with spec.maxStarting M (repeatable)"
    )
    parser.add_argument("--floor", action="store_true", help="trivial pods instead of a run: Kubernetes' own part of the figure")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdpval-bench-startup-") as tmp:
        report = bench(args, Path(tmp))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for label, one in report.items() if args.ahead or args.pool else [("as is", report)]:
        figure = one["start_to_first_model_request"]
        print(f"{label}: {one['measured']} pods: start -> first model request p50 {figure['p50_s']} s, p99 {figure['p99_s']} s")


if __name__ == "__main__":
    main()

"""The real operator at scale: a throwaway etcd + kube-apiserver, MinIO, the cluster around it played.

The operator runs as a process (`python -m gdpval.controller`), exactly as deployed but for the
kubeconfig; the kubelet, agent and Job controller are played by bench/standin.py, which commits
each sample's result.json to MinIO at its layout key when its pod "finishes". Nothing here loads
the shared test cluster. Prints JSON: requests per sample by verb (the API server's
apiserver_request_total, without the status writes the benchmark itself makes as the kubelet and
Job controller), the largest object written, etcd size growth, operator peak RSS, reconcile pass
p50/p99 (the operator's histogram), pod finished -> deleted p50/p99, and per-run progress spread.

Usage: .venv/bin/python bench/operator_scale.py --samples N --parallelism P --runs R [--sample-seconds S] --json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import yaml  # noqa: E402
from bench import measure  # noqa: E402
from bench.standin import Cluster  # noqa: E402
from kubernetes import client, config  # noqa: E402

from gdpval.api import v1alpha1 as api  # noqa: E402
from gdpval.api.v1alpha1 import OutputSpec  # noqa: E402
from gdpval.controller.effects.s3 import open_output  # noqa: E402
from infra.minio import MinioServer  # noqa: E402
from support.controlplane import ControlPlane, control_plane  # noqa: E402
from support.operator import CRD, OperatorProcess, run_manifest  # noqa: E402
from support.polling import wait_until  # noqa: E402

NS = "bench"
IMAGES = ("localhost/gdpval-operator:dev", "localhost/gdpval-sandbox:slim-dev")


def fetch(url: str, plane: ControlPlane | None = None) -> str:
    """A metrics page: the API server's with the admin token, else plain HTTP (etcd, the operator)."""
    headers, context = ({"Authorization": f"Bearer {plane.token}"}, plane.tls()) if plane else ({}, None)
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30, context=context) as resp:
        return resp.read().decode()


def apiserver_requests(plane: ControlPlane) -> dict[measure.Labels, float]:
    return measure.series(measure.parse_metrics(fetch(f"{plane.api_url}/metrics", plane)), "apiserver_request_total")


def etcd_size(plane: ControlPlane) -> dict[str, float]:
    samples = measure.parse_metrics(fetch(f"{plane.etcd_url}/metrics"))
    wanted = {"etcd_mvcc_db_total_size_in_bytes": "db", "etcd_mvcc_db_total_size_in_use_in_bytes": "in_use", "etcd_debugging_mvcc_keys_total": "keys"}
    return {wanted[s.name]: s.value for s in samples if s.name in wanted}


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the process's resident set high-water mark."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmHWM for pid {pid}")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def operator_tree(commit: str | None, workdir: Path) -> dict[str, Any]:
    """Which operator runs: the working tree (with whatever is uncommitted), or `commit`'s package,
    exported to `workdir` and put first on the operator's PYTHONPATH."""
    if commit is None:
        dirty = git("status", "--porcelain", "--", "operator/gdpval").split("\n")
        return {"commit": git("rev-parse", "--short", "HEAD").strip(), "uncommitted_package_files": sorted(line[3:] for line in dirty if line.strip())}
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "operator/gdpval"], capture_output=True, check=True).stdout
    (workdir / "tree").mkdir()
    subprocess.run(["tar", "-x", "-C", str(workdir / "tree")], input=archive, check=True)
    os.environ["PYTHONPATH"] = str(workdir / "tree" / "operator")
    return {"commit": git("rev-parse", "--short", commit).strip(), "uncommitted_package_files": []}


def install(kube: client.ApiClient, minio: MinioServer) -> None:
    """The CRD, the namespace and the run's S3 credentials Secret."""
    ext, core = client.ApiextensionsV1Api(kube), client.CoreV1Api(kube)
    ext.create_custom_resource_definition(yaml.safe_load(CRD.read_text()))

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(f"{api.PLURAL}.{api.GROUP}").status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_until(established, 60, "the CRD established", 0.2)
    core.create_namespace({"metadata": {"name": NS}})
    core.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})
    creds = {"AWS_ACCESS_KEY_ID": minio.access_key, "AWS_SECRET_ACCESS_KEY": minio.secret_key}
    core.create_namespaced_secret(NS, {"metadata": {"name": "s3-credentials"}, "stringData": creds})


def create_runs(kube: client.ApiClient, names: list[str], bucket: str, endpoint: str, parallelism: int) -> None:
    custom = client.CustomObjectsApi(kube)
    for name in names:
        manifest = run_manifest(
            name,
            NS,
            model_url="http://127.0.0.1:9/v1",
            dataset=f"s3://{bucket}/dataset",
            output_url=f"s3://{bucket}/out",
            endpoint=endpoint,
            images=IMAGES,
            parallelism=parallelism,
            samples={"retries": 1, "backoffSeconds": 1, "pendingTimeoutSeconds": 3600},
        )
        custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, manifest)


PHASES = ("gather", "decide", "ledger", "apply", "status", "events")


def histogram_figures(samples: list[measure.Sample], name: str, phase: str | None = None) -> dict[str, Any]:
    """p50/p99 as Prometheus interpolates them, the mean, and how many went over 1 s and 30 s."""
    if phase is not None:
        samples = [s for s in samples if s.label("phase") == phase]
    buckets = measure.histogram(samples, name)
    p50, p99 = measure.histogram_quantile(buckets, 0.5), measure.histogram_quantile(buckets, 0.99)
    count = buckets.get(float("inf"), 0)
    total = sum(s.value for s in samples if s.name == f"{name}_sum")
    return {
        "count": int(count),
        "p50_s": round(p50, 3) if p50 is not None else None,
        "p99_s": round(p99, 3) if p99 is not None else None,
        "mean_s": round(total / count, 3) if count else None,
        "over_1s": int(count - buckets.get(1.0, 0)),
        "over_30s": int(count - buckets.get(30.0, 0)),
    }


def operator_metrics(port: int) -> dict[str, Any]:
    samples = measure.parse_metrics(fetch(f"http://127.0.0.1:{port}/metrics"))
    passes = histogram_figures(samples, "gdpval_reconcile_duration_seconds")
    return {
        "passes": passes.pop("count"),
        **passes,
        "slot_wait": histogram_figures(samples, "gdpval_reconcile_wait_seconds"),
        "phases": {phase: histogram_figures(samples, "gdpval_reconcile_phase_seconds", phase) for phase in PHASES},
        "errors": int(sum(s.value for s in samples if s.name == "gdpval_reconcile_errors_total")),
        "samples_retried": int(sum(s.value for s in samples if s.name == "gdpval_samples_retried")),
    }


def seconds(values: list[float]) -> dict[str, float | None]:
    def r(v: float | None) -> float | None:
        return round(v, 3) if v is not None else None

    return {"p50_s": r(measure.percentile(values, 50)), "p99_s": r(measure.percentile(values, 99)), "max_s": r(max(values, default=None) if values else None)}


def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    names = [f"run{i:02d}" for i in range(args.runs)]
    total = args.samples * args.runs
    tree = operator_tree(args.commit, workdir)
    (workdir / "minio").mkdir()
    with MinioServer(data_dir=workdir / "minio") as minio, control_plane(workdir / "controlplane", NS) as plane:
        kube = config.new_client_from_config(str(plane.kubeconfig))
        kube.configuration.connection_pool_maxsize = 32
        install(kube, minio)
        bucket = "bench"
        minio.client().create_bucket(Bucket=bucket)
        creds = {"access_key_id": minio.access_key, "secret_access_key": minio.secret_key}
        storage = open_output(OutputSpec(url=f"s3://{bucket}/out", endpoint=minio.endpoint_url), creds)
        (workdir / "operator-logs").mkdir()
        cluster = Cluster(kube, NS, storage, args.samples, args.sample_seconds)
        operator = OperatorProcess(str(plane.kubeconfig), NS, *IMAGES, workdir / "operator-logs")
        try:
            cluster.start()
            operator.start()
            wait_until(lambda: _healthy(operator.metrics_port), 60, "the operator's /healthz", 0.5)
            before, etcd_before = apiserver_requests(plane), etcd_size(plane)
            started = time.monotonic()
            create_runs(kube, names, bucket, minio.endpoint_url, args.parallelism)
            done = cluster.wait_states(names, ("Succeeded", "Failed"), args.timeout)
            wall = (max(done.values()) if len(done) == len(names) else time.monotonic()) - started
            if len(done) == len(names):
                wait_until(lambda: len(cluster.times.deleted) >= len(cluster.times.finished), 60, "every finished pod deleted", 0.5)
            growth = measure.operator_requests(measure.delta(before, apiserver_requests(plane)))
            etcd_after = etcd_size(plane)
            per_verb = measure.by_verb(growth, per=total if len(done) == len(names) else max(1, len(cluster.times.finished)))
            report = {
                "samples": args.samples,
                "runs": args.runs,
                "parallelism": args.parallelism,
                "sample_seconds": args.sample_seconds,
                "states": {name: cluster.states.get(name) for name in names} if args.runs <= 3 else _count(cluster.states.values()),
                "wall_seconds": round(wall, 1),
                "timed_out": len(done) < len(names),
                "samples_finished": len(cluster.times.finished),
                "last_sample_finished_seconds": round(max(cluster.times.finished.values(), default=started) - started, 1),
                "samples_per_second": round(len(cluster.times.finished) / wall, 1),
                "api_requests_per_sample": per_verb,
                "api_writes_per_sample": measure.writes(per_verb),
                "api_writes_by_resource": measure.by_resource(growth),
                "largest_object": cluster.largest.report(),
                "etcd_growth_bytes": {k: int(etcd_after.get(k, 0) - etcd_before.get(k, 0)) for k in etcd_after},
                "operator_peak_rss_mb": peak_rss_mb(operator.proc.pid) if operator.proc else None,
                "reconcile_pass": operator_metrics(operator.metrics_port),
                "pod_finished_to_deleted": seconds(cluster.times.finished_to_deleted()),
                "progress_spread": measure.progress_spread(cluster.times.finished_by_run, args.samples) if args.runs > 1 else None,
                "standin_errors": cluster.errors[:10],
                "operator_tree": tree,
            }
        finally:
            operator.stop()
            cluster.close()
    return report


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _healthy(port: int) -> bool:
    try:
        return fetch(f"http://127.0.0.1:{port}/healthz") == "ok"
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1000, help="samples per run")
    parser.add_argument("--parallelism", type=int, default=100, help="spec.parallelism of each run")
    parser.add_argument("--runs", type=int, default=1, help="concurrent runs")
    parser.add_argument("--sample-seconds", type=float, default=2.0, help="how long each sample pod runs")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds to wait for every run to end")
    parser.add_argument("--commit", help="run the operator package of this commit (default: the working tree as it is)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (else a short summary)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (operator and API server logs)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the operator, API server and MinIO on the way out
    workdir = Path(tempfile.mkdtemp(prefix="gdpval-bench-scale-"))
    try:
        report = bench(args, workdir)
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(workdir)], check=False)
        else:
            print(f"work folder: {workdir}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{args.runs} x {args.samples} samples, parallelism {args.parallelism}: {report['wall_seconds']} s, "
            f"{report['api_writes_per_sample']} writes/sample, largest {report['largest_object']['bytes']} B, "
            f"RSS {report['operator_peak_rss_mb']} MB, pass p99 {report['reconcile_pass']['p99_s']} s"
        )


if __name__ == "__main__":
    main()

"""Helpers for the operator's cluster tests: kubectl, the operator process, runs, S3 checks, and `Env`
(the shared operator namespace of tests/cluster/conftest.py's `env` fixture)."""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from gdpval.fakemodel.script import parse_inventory
from infra.paths import REPO_ROOT, cache_dir, versions
from support.cli import SUBMISSION_COLUMNS
from support.polling import wait_until
from support.processes import free_port

CRD = REPO_ROOT / "crds" / "gdpval.io_gdpvalruns.yaml"
CRDS = REPO_ROOT / "crds"
RUN_TIMEOUT = 600
TASKS = 12  # the sample dataset's


def kubectl_binary() -> str:
    built = cache_dir() / "kubernetes" / versions()["K8S_VERSION"] / "bin" / "kubectl"
    for candidate in (built, cache_dir() / "tools" / "bin" / "kubectl"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found: bring the cluster up with hack/cluster.sh up")
    return found


def image_ref(name: str, fallback: str) -> str:
    """The locally built image as hack/images.sh recorded it."""
    ref = cache_dir() / "images" / "refs" / name
    return ref.read_text().strip() if ref.is_file() else fallback


@dataclass
class Kube:
    kubeconfig: str
    namespace: str
    kubectl: str = field(default_factory=kubectl_binary)

    def run(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [self.kubectl, "--kubeconfig", self.kubeconfig, "-n", self.namespace, *args]
        done = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def apply(self, obj: dict[str, Any], *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("apply", *extra, "-f", "-", input=yaml.safe_dump(obj), check=check)

    def get(self, kind: str, name: str | None = None, selector: str | None = None) -> Any:
        args = ["get", kind, *([name] if name else []), "-o", "json"]
        if selector:
            args += ["-l", selector]
        done = self.run(*args, check=False)
        if done.returncode != 0:
            return None
        return json.loads(done.stdout)

    def run_status(self, name: str) -> dict[str, Any]:
        obj = self.get("gdpvalrun", name)
        return (obj or {}).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.run_status(name).get("conditions", []) if c["type"] == type_), {})

    def wait_for(self, predicate, timeout: float, what: str, interval: float = 0.5) -> Any:
        return wait_until(predicate, timeout, what, interval)


@dataclass
class OperatorProcess:
    """The operator as a separate process, so a test can SIGKILL it and start it again."""

    kubeconfig: str
    namespace: str
    agent_image: str
    sandbox_image: str
    log_dir: Path
    metrics_port: int = field(default_factory=free_port)
    extra_args: tuple[str, ...] = ()  # e.g. --leader-elect
    hostname: str = ""  # $HOSTNAME, the replica's identity in leader election and Events
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        log = open(self.log_dir / f"operator-{self.starts}.log", "w")
        cmd = [
            sys.executable,
            "-m",
            "gdpval.controller",
            "--namespace",
            self.namespace,
            "--metrics-port",
            str(self.metrics_port),
            "--agent-image",
            self.agent_image,
            "--sandbox-image",
            self.sandbox_image,
            *self.extra_args,
        ]
        env = {**os.environ, "KUBECONFIG": self.kubeconfig} | ({"HOSTNAME": self.hostname} if self.hostname else {})
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self

    def metrics(self) -> str:
        """The process's /metrics, as Prometheus text."""
        return urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()

    def serving(self) -> bool:
        """Whether the process answers on its metrics port (any status: /healthz may report a problem)."""
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=5).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def wait_serving(self, timeout: float = 120) -> OperatorProcess:
        """Until /metrics and /healthz answer, for a test that reads them first: a loaded machine starts the process late."""

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, f"the operator exited:\n{self.logs()[-4000:]}"
            return self.serving()

        wait_until(up, timeout, f"the operator serving on :{self.metrics_port}", 0.2)
        return self

    def kill(self) -> None:
        """SIGKILL: no cleanup handler runs, exactly like a crashed or evicted operator."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.log_dir.glob("operator-*.log")))


def run_manifest(
    name: str, namespace: str, *, model_url: str, dataset: str, output_url: str, endpoint: str, images: tuple[str, str], **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"name": "scripted", "baseURL": model_url},
        "dataset": {"id": dataset},
        "output": {"url": output_url, "endpoint": endpoint, "region": "us-east-1", "credentialsSecret": {"name": "s3-credentials"}},
        "images": {"agent": images[0], "sandbox": images[1], "pullPolicy": "Never"},
        "parallelism": 4,
        "agent": {"sampleDeadlineSeconds": 900},
        "samples": {"retries": 1, "backoffSeconds": 1, "pendingTimeoutSeconds": 300},
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": "gdpval.io/v1alpha1", "kind": "GdpvalRun", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def pool_manifest(name: str, namespace: str, *, images: tuple[str, str], size: int, **spec: Any) -> dict[str, Any]:
    """A GdpvalPool whose pods match the runs of run_manifest (same images, default sandbox and pod settings)."""
    body = {"size": size, "images": {"agent": images[0], "sandbox": images[1], "pullPolicy": "Never"}, **spec}
    return {"apiVersion": "gdpval.io/v1alpha1", "kind": "GdpvalPool", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def run_folder(status: Mapping[str, Any]) -> str:
    """A GdpvalRun's folder under runs/ (`<namespace>.<name>-<uid prefix>`), as its status names it."""
    return status["storageURI"].rsplit("/runs/", 1)[1]


def result_keys(client, bucket: str, prefix: str, run: str) -> dict[str, list[tuple[int, str]]]:
    """Committed attempts per sample (of the run folder `run`) with their status, from the result.json markers in S3."""
    out: dict[str, list[tuple[int, str]]] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/runs/{run}/samples/"):
        for obj in page.get("Contents", ()):
            parts = obj["Key"].split("/")
            if parts[-1] == "result.json":
                status = json.loads(client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())["status"]
                out.setdefault(parts[-3], []).append((int(parts[-2].removeprefix("attempt-")), status))
    return {sample: sorted(attempts) for sample, attempts in out.items()}


def assert_committed_once(committed: dict[str, list[tuple[int, str]]]) -> None:
    """Each sample succeeded exactly once, in its last attempt: nothing ran after a success."""
    for sample, attempts in committed.items():
        successes = [a for a, status in attempts if status == "succeeded"]
        assert len(successes) == 1 and successes[0] == attempts[-1][0], (sample, attempts)


def upload_tree(client, bucket: str, prefix: str, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")


# Specs the API server must refuse: (case, how to break a valid manifest, what the refusal says).
INVALID = [
    ("missing model", lambda m: m["spec"].pop("model"), "spec.model: Required value"),
    ("zero parallelism", lambda m: m["spec"].update(parallelism=0), "spec.parallelism"),
    ("negative parallelism", lambda m: m["spec"].update(parallelism=-3), "should be greater than or equal to 1"),
    ("bad s3 url", lambda m: m["spec"]["output"].update(url="https://bucket/prefix"), "output.url must look like s3://bucket/prefix"),
    ("missing output", lambda m: m["spec"].pop("output"), "spec.output: Required value"),
    ("local folder as dataset", lambda m: m["spec"]["dataset"].update(id="/data/gdpval"), "dataset.id must be a ModelScope dataset id"),
    ("budget over 100%", lambda m: m["spec"].update(failureBudget="150%"), "failureBudget must be a count"),
    ("zero repeats", lambda m: m["spec"].update(selection={"repeats": 0}), "spec.selection.repeats"),
    ("temperature too high", lambda m: m["spec"]["model"].update(temperature=5), "spec.model.temperature"),
    ("unknown pull policy", lambda m: m["spec"]["images"].update(pullPolicy="Sometimes"), "Unsupported value"),
    ("name too long", lambda m: m["metadata"].update(name="r" * 64), "at most 63 characters"),
    ("model URL not http", lambda m: m["spec"]["model"].update(baseURL="ftp://host/v1"), "spec.model.baseURL in body should match"),
    ("empty model name", lambda m: m["spec"]["model"].update(name=""), "spec.model.name"),
    ("sample deadline too short", lambda m: m["spec"]["agent"].update(sampleDeadlineSeconds=0), "spec.agent.sampleDeadlineSeconds"),
]


def install_crd(kube: Kube) -> None:
    """The CRDs as `kubectl apply` installs them (the Helm tests install them with the chart instead)."""
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
    for crd in ("gdpvalruns.gdpval.io", "gdpvalpools.gdpval.io"):
        kube.wait_for(lambda crd=crd: established(kube, crd), 60, f"the {crd} CRD to be established")


def established(kube: Any, crd: str) -> bool:
    """Polled rather than `kubectl wait`, which fails at once on a CRD just (re)created by another
    test, whose status has no conditions yet."""
    conditions = ((kube.get("crd", crd) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def restricted_namespace(kube: Kube, s3) -> None:
    """`kube.namespace` under the `restricted` Pod Security Standard, with an `s3-credentials` Secret
    holding the keys of the MinIO server `s3`."""
    labels = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kube.namespace, "labels": labels}})
    access = f"--from-literal=AWS_ACCESS_KEY_ID={s3.access_key}"
    kube.run("create", "secret", "generic", "s3-credentials", access, f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret_key}")


def project_images(cluster) -> tuple[str, str]:
    """The agent (operator) image and the slim sandbox image this tree built, as the cluster has them."""
    agent = cluster.images.get("operator", image_ref("operator", "localhost/gdpval-operator:dev"))
    return agent, cluster.images.get("sandbox-slim", image_ref("sandbox-slim", "localhost/gdpval-sandbox:slim-dev"))


@dataclass
class OperatorNamespace:
    """A restricted namespace with the CRD, S3 credentials, a dataset in MinIO and the operator running."""

    kube: Kube
    operator: OperatorProcess
    bucket: str
    client: Any
    endpoint: str
    images: tuple[str, str]

    def manifest(self, name: str, model_url: str, **spec: Any) -> dict[str, Any]:
        """A GdpvalRun over this namespace's dataset, writing to its bucket."""
        where = dict(dataset=f"s3://{self.bucket}/dataset", output_url=f"s3://{self.bucket}/out", endpoint=self.endpoint, images=self.images)
        return run_manifest(name, self.kube.namespace, model_url=model_url, **where, **spec)


@contextmanager
def operator_namespace(cluster, s3, prefix: str, dataset: Path, log_dir: Path, images: tuple[str, str] | None = None) -> Iterator[OperatorNamespace]:
    """Set up, yield, and remove (without waiting) one operator's namespace; `dataset` lands at `dataset/`."""
    kube = Kube(str(cluster.kubeconfig), f"{prefix}-{secrets.token_hex(3)}", cluster.kubectl_path)
    install_crd(kube)
    restricted_namespace(kube, s3)
    bucket, client = s3.make_bucket(), s3.client()
    upload_tree(client, bucket, "dataset", dataset)
    images = images or project_images(cluster)
    operator = OperatorProcess(str(cluster.kubeconfig), kube.namespace, *images, log_dir).start().wait_serving()
    try:
        yield OperatorNamespace(kube, operator, bucket, client, s3.endpoint_url, images)
    finally:
        operator.stop()
        kube.run("delete", "namespace", kube.namespace, "--wait=false", check=False)


def job_finished(job: dict) -> bool:
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in job.get("status", {}).get("conditions", []))


class Env:
    def __init__(self, kube: Kube, operator: OperatorProcess, bucket: str, client, endpoint: str, model_url: str, node_ip: str, dataset, images):
        self.kube, self.operator, self.bucket, self.client, self.images = kube, operator, bucket, client, images
        self.endpoint, self.model_url, self.node_ip, self.dataset = endpoint, model_url, node_ip, dataset

    def manifest(self, name: str, model_url: str | None = None, **spec):
        return run_manifest(
            name,
            self.kube.namespace,
            model_url=model_url or self.model_url,
            dataset=f"s3://{self.bucket}/dataset",
            output_url=f"s3://{self.bucket}/out",
            endpoint=self.endpoint,
            images=self.images,
            **spec,
        )

    def submit(self, name: str, **spec) -> str:
        self.kube.apply(self.manifest(name, **spec))
        return name

    def wait_condition(self, name: str, condition: str, timeout: float = RUN_TIMEOUT) -> None:
        done = self.kube.run("wait", f"--for=condition={condition}", f"gdpvalrun/{name}", f"--timeout={int(timeout)}s", check=False, timeout=timeout + 30)
        if done.returncode != 0:
            status = self.kube.run_status(name)
            raise AssertionError(f"{name} not {condition}: {status}\n--- operator log tail ---\n{self.operator.logs()[-4000:]}")

    def submission_table(self, run: str):
        body = self.client.get_object(Bucket=self.bucket, Key=f"out/runs/{run_folder(self.kube.run_status(run))}/submission/data/train-00000-of-00001.parquet")[
            "Body"
        ].read()
        return pq.read_table(io.BytesIO(body))

    def submission_rows(self, run: str) -> list[dict]:
        return self.submission_table(run).to_pylist()

    def sample_pods(self, run: str) -> list[dict]:
        listed = self.kube.get("pods", selector=f"gdpval.io/run={run},app.kubernetes.io/component=sample") or {}
        return listed.get("items", [])

    def pods_in(self, run: str, *phases: str) -> list[dict]:
        return [p for p in self.sample_pods(run) if p.get("status", {}).get("phase") in phases]

    def progress(self, run: str) -> int:
        return int((self.kube.run_status(run).get("progress") or "0/").split("/")[0] or 0)

    def wait_for_job(self, run: str, component: str, finished: bool = False) -> dict:
        """The run's prepare or assemble Job, once it exists (or, with `finished`, once it completed or failed)."""

        def job() -> dict | None:
            items = (self.kube.get("jobs", selector=f"gdpval.io/run={run},app.kubernetes.io/component={component}") or {}).get("items")
            return items[0] if items and (not finished or job_finished(items[0])) else None

        return self.kube.wait_for(job, RUN_TIMEOUT, f"the {component} Job of {run}{' to finish' if finished else ''}", 0.1)

    def assert_complete_submission(self, run: str, tasks: int = TASKS) -> None:
        """The checks of the local run's test: columns, every task (of the first `tasks`) once, files there, references
        seen whole."""
        table = self.submission_table(run)
        assert table.column_names == SUBMISSION_COLUMNS
        rows = table.to_pylist()
        task_ids = [r["task_id"] for r in rows]
        assert len(rows) == tasks and len(set(task_ids)) == tasks, task_ids
        folder = run_folder(self.kube.run_status(run))
        root = f"out/runs/{folder}/submission"
        for row in rows:
            assert row["deliverable_files"], row["task_id"]
            for rel in row["deliverable_files"]:
                assert rel.startswith(f"deliverable_files/{row['task_id']}/")
                self.client.head_object(Bucket=self.bucket, Key=f"{root}/{rel}")
            text = self.client.get_object(Bucket=self.bucket, Key=f"{root}/{row['deliverable_files'][0]}")["Body"].read().decode()
            seen = {p.split("/reference_files/", 1)[-1].split("/", 1)[-1]: size for p, size in parse_inventory(text).items()}
            expected = {ref.split("/", 2)[2]: (self.dataset / ref).stat().st_size for ref in row["reference_files"]}
            assert seen == expected, row["task_id"]  # staged read-only, whole, at /reference_files/<hash>/<name>
        committed = result_keys(self.client, self.bucket, "out", folder)
        assert len(committed) == tasks
        assert_committed_once(committed)


def sigkill_in_pod(pod_uid: str, command: str) -> list[int]:
    """SIGKILL, from the node (this machine), each process of the pod whose command line holds `command`; their ids.
    From inside, `kubectl exec ... kill -9 1` cannot: a PID namespace's init ignores signals it has no handler for."""
    killed = []
    for proc in Path("/proc").iterdir():
        try:
            if f"pod{pod_uid}" in (proc / "cgroup").read_text() and command in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except (OSError, ValueError):
            continue  # not a process, or gone
    return killed

"""The operator against a real kube-apiserver and etcd, with the kubelet's part played by the test.

No node runs pods here: the test moves pods and Jobs through their lifecycle by writing their
status (as the kubelet and the Job controller would) and writes result.json to MinIO (as the
agent would). That makes it possible to SIGKILL the operator at any chosen point, many times,
and check after every step that no sample ever has two live pods or runs again after it committed.
The API server is real: CRD schema and CEL rules, status subresource, PodSecurity admission of the
`restricted` namespace, optimistic concurrency on the ledger.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gdpval import contract
from gdpval.api import v1alpha1 as api
from gdpval.api.v1alpha1 import OutputSpec
from gdpval.controller.effects.s3 import open_output
from gdpval.controller.pure import names as n
from gdpval.controller.pure import pool, queue, workload
from gdpval.dataset.models import DatasetRef, Sample, Task
from gdpval.manifest import ManifestEntry, dump_manifest
from gdpval.sample import SampleResult, SampleStatus, Usage
from gdpval.storage import layout
from support import runs
from support.controlplane import binaries
from support.operator import CRDS, INVALID, OperatorProcess, pool_manifest, run_manifest
from support.polling import wait_until
from support.processes import free_port

pytestmark = [pytest.mark.cluster]

NS = "cp"
IMAGES = ("localhost/gdpval-operator:dev", "localhost/gdpval-sandbox:slim-dev")


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    """etcd and kube-apiserver on loopback ports of their own; a kubeconfig with a static token."""
    apiserver, etcd = binaries()
    root = tmp_path_factory.mktemp("controlplane")
    subprocess.run(["openssl", "genrsa", "-out", root / "sa.key", "2048"], check=True, capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", root / "sa.key", "-pubout", "-out", root / "sa.pub"], check=True, capture_output=True)
    (root / "tokens.csv").write_text("test-token,admin,admin,system:masters\n")
    client_port, peer_port, api_port = free_port(), free_port(), free_port()
    procs = [
        subprocess.Popen(
            [
                etcd,
                "--data-dir",
                root / "etcd",
                "--listen-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
            ],
            stdout=open(root / "etcd.log", "w"),
            stderr=subprocess.STDOUT,
        )
    ]
    procs.append(
        subprocess.Popen(
            [
                apiserver,
                "--etcd-servers",
                f"http://127.0.0.1:{client_port}",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(api_port),
                "--cert-dir",
                root / "certs",
                "--token-auth-file",
                root / "tokens.csv",
                "--authorization-mode",
                "AlwaysAllow",
                "--service-account-key-file",
                root / "sa.pub",
                "--service-account-signing-key-file",
                root / "sa.key",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-cluster-ip-range",
                "10.98.0.0/16",
            ],
            stdout=open(root / "apiserver.log", "w"),
            stderr=subprocess.STDOUT,
        )
    )
    kubeconfig = root / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "cp",
                "clusters": [{"name": "cp", "cluster": {"server": f"https://127.0.0.1:{api_port}", "insecure-skip-tls-verify": True}}],
                "users": [{"name": "admin", "user": {"token": "test-token"}}],
                "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "admin", "namespace": NS}}],
            }
        )
    )
    try:
        yield _connect(kubeconfig, root)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(timeout=30)


class Cp:
    def __init__(self, kubeconfig: Path, root: Path, api_client):
        self.kubeconfig, self.root = kubeconfig, root
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.ext = client.ApiextensionsV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)


def _connect(kubeconfig: Path, root: Path) -> Cp:
    deadline = time.monotonic() + 90
    while True:
        try:
            api_client = config.new_client_from_config(str(kubeconfig))
            cp = Cp(kubeconfig, root, api_client)
            cp.core.list_namespace()
            return cp
        except Exception:
            if time.monotonic() > deadline:
                raise AssertionError("kube-apiserver did not start: " + (root / "apiserver.log").read_text()[-3000:]) from None
            time.sleep(1)


@pytest.fixture(scope="module")
def env(control_plane, s3, tmp_path_factory):
    cp = control_plane
    for plural in (api.PLURAL, api.POOL_PLURAL):
        cp.ext.create_custom_resource_definition(yaml.safe_load((CRDS / f"{api.GROUP}_{plural}.yaml").read_text()))
        _wait(
            lambda plural=plural: any(
                c.type == "Established" and c.status == "True" for c in cp.ext.read_custom_resource_definition(f"{plural}.{api.GROUP}").status.conditions or []
            ),
            30,
        )
    cp.core.create_namespace({"metadata": {"name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    cp.core.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})
    cp.core.create_namespaced_secret(
        NS, {"metadata": {"name": "s3-credentials"}, "stringData": {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}}
    )
    bucket = s3.make_bucket()
    storage = open_output(OutputSpec(url=f"s3://{bucket}/out", endpoint=s3.endpoint_url), {"access_key_id": s3.access_key, "secret_access_key": s3.secret_key})
    operator = OperatorProcess(str(cp.kubeconfig), NS, *IMAGES, tmp_path_factory.mktemp("operator")).start().wait_serving()
    yield Env(cp, operator, storage, bucket, s3.endpoint_url)
    operator.stop()


def _wait(predicate, timeout: float, what: str = "condition", interval: float = 0.2):
    return wait_until(predicate, timeout, what, interval)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Env:
    def __init__(self, cp: Cp, operator: OperatorProcess, storage, bucket: str, endpoint: str):
        self.cp, self.operator, self.storage, self.bucket, self.endpoint = cp, operator, storage, bucket, endpoint

    def create(self, name: str, labels: dict[str, str] | None = None, **spec) -> None:
        manifest = run_manifest(
            name,
            NS,
            model_url="http://10.250.0.1:8000/v1",
            dataset=f"s3://{self.bucket}/dataset",
            output_url=f"s3://{self.bucket}/out",
            endpoint=self.endpoint,
            images=IMAGES,
            **spec,
        )
        if labels:
            manifest["metadata"]["labels"] = labels
        self.cp.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, manifest)

    def patch(self, name: str, spec: dict) -> None:
        self.cp.custom.patch_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name, {"spec": spec})

    def run(self, name: str) -> dict:
        return self.cp.custom.get_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)

    def folder(self, name: str) -> str:
        """The run's folder in the bucket, as the operator names it."""
        return layout.cluster_run(NS, name, self.run(name)["metadata"]["uid"])

    def status(self, name: str) -> dict:
        return self.run(name).get("status") or {}

    def condition(self, name: str, type_: str) -> dict:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), {})

    def pods(self, name: str) -> list:
        return self.cp.core.list_namespaced_pod(NS, label_selector=f"gdpval.io/run={name},app.kubernetes.io/component=sample").items

    def jobs(self, name: str) -> dict:
        return {
            j.metadata.labels["app.kubernetes.io/component"]: j for j in self.cp.batch.list_namespaced_job(NS, label_selector=f"gdpval.io/run={name}").items
        }

    def prepare(self, name: str, samples: int) -> list[str]:
        """What the prepare Job writes, then its completion as the Job controller would record it."""
        folder = self.folder(name)
        record = runs.record(folder, dataset=DatasetRef(source="s3", location="s3://x/dataset", revision="rev-cp"))
        entries = [
            ManifestEntry(sample=Sample.of(f"task{i}", 0), task=Task(task_id=f"task{i}", sector="s", occupation="o", prompt="p")) for i in range(samples)
        ]
        self.storage.put_text(layout.manifest(folder), dump_manifest(entries))
        self.storage.put_text(layout.run_json(folder), record.dump())
        self.complete_job(name, "prepare")
        return [e.sample.sample_id for e in entries]

    def complete_job(self, name: str, component: str, failed: bool = False) -> None:
        now = _now()
        if failed:
            conditions = [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": now,
                },
            ]
            status = {"startTime": now, "failed": 1, "conditions": conditions}
        else:
            conditions = [
                {"type": t, "status": "True", "reason": "CompletionsReached", "message": "done", "lastTransitionTime": now}
                for t in ("SuccessCriteriaMet", "Complete")
            ]
            status = {"startTime": now, "completionTime": now, "succeeded": 1, "conditions": conditions}
        job = self.jobs(name)[component]
        self.cp.batch.patch_namespaced_job_status(job.metadata.name, NS, {"status": status})

    def finish_pod(self, pod, outcome: str) -> None:
        """ok/bad: the agent commits a result and exits 0; crash: exits 1 without one; gone: deleted."""
        labels = pod.metadata.labels
        sample, attempt = pod.metadata.annotations["gdpval.io/sample-id"], int(labels["gdpval.io/attempt"])
        run = self.folder(labels["gdpval.io/run"])
        if outcome == "gone":
            self.cp.core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
            return
        if outcome in ("ok", "bad"):
            key = layout.result(run, sample, attempt)
            assert not self.storage.exists(key), f"{key} committed twice"
            result = SampleResult(
                sample_id=sample,
                task_id=sample,
                attempt=attempt,
                status=SampleStatus.succeeded if outcome == "ok" else SampleStatus.failed,
                error_kind=None if outcome == "ok" else "max_steps",
                usage=Usage(input_tokens=7, output_tokens=3),
            )
            self.storage.put_text(key, result.model_dump_json())
        code = 1 if outcome == "crash" else 0
        state = {"terminated": {"exitCode": code, "reason": "Error" if code else "Completed", "message": "simulated"}}
        status = {
            "phase": "Failed" if code else "Succeeded",
            "containerStatuses": [{"name": "agent", "image": IMAGES[0], "imageID": "", "ready": False, "restartCount": 0, "state": state}],
        }
        self.cp.core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": status})

    def run_pod(self, pod, ready: bool) -> None:
        """What the kubelet records once a pod's containers run: Ready once the agent's startup probe passed."""
        condition = {"type": "Ready", "status": str(ready), "lastTransitionTime": _now()}
        self.cp.core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": {"phase": "Running", "conditions": [condition]}})

    def committed(self, run: str) -> dict[str, list[tuple[int, str]]]:
        out: dict[str, list[tuple[int, str]]] = {}
        for key in self.storage.list(layout.samples(self.folder(run))):
            if key.endswith("/result.json"):
                parts = key.split("/")
                status = json.loads(self.storage.get_text(key))["status"]
                out.setdefault(parts[-3], []).append((int(parts[-2].removeprefix("attempt-")), status))
        return out


def _check_invariants(env: Env, name: str, parallelism: int) -> None:
    live = [p for p in env.pods(name) if p.status.phase in (None, "Pending", "Running") and not p.metadata.deletion_timestamp]
    samples = [p.metadata.annotations["gdpval.io/sample-id"] for p in live]
    assert len(samples) == len(set(samples)), f"two live pods for one sample: {samples}"
    assert len(live) <= parallelism, f"{len(live)} live pods > parallelism {parallelism}"
    for sample, attempts in env.committed(name).items():
        ok = [a for a, status in attempts if status == "succeeded"]
        assert len(ok) <= 1 and (not ok or max(a for a, _ in attempts) == ok[0]), f"{sample} ran again after success: {attempts}"
        assert not any(p.metadata.annotations["gdpval.io/sample-id"] == sample for p in live) or not ok, f"{sample} live after success"
    for pod in env.pods(name):
        owner = pod.metadata.owner_references[0]
        assert owner.controller and owner.kind == api.KIND and owner.name == name


def _pending_or_assembling(env: Env, name: str) -> list | str:
    """The run's live sample pods (what the test plays the kubelet for), or "Assembling" once none will come."""
    if env.status(name).get("state") == "Assembling":
        return "Assembling"
    return [p for p in env.pods(name) if p.status.phase in ("Pending", "Running") and not p.metadata.deletion_timestamp]


def test_lifecycle_with_sigkills_between_every_step(env):
    """Random outcomes, the operator killed at random points; the run still ends exactly once per sample."""
    rng = random.Random(int(os.environ.get("GDPVAL_CHAOS_SEED", "4")))
    name, parallelism = "chaos", 3
    env.create(name, parallelism=parallelism, failureBudget="100%", samples={"retries": 2, "backoffSeconds": 0})
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.operator.kill()
    samples = env.prepare(name, 8)
    env.operator.start()
    for _ in range(200):
        live = _wait(lambda: _pending_or_assembling(env, name), 60, "a pending sample pod or the run assembling")
        if live == "Assembling":
            break
        env.finish_pod(rng.choice(live), rng.choices(["ok", "bad", "crash", "gone"], [6, 2, 1, 1])[0])
        if rng.random() < 0.35:
            time.sleep(rng.random() * 0.6)  # chaos: a random point in the operator's reaction
            env.operator.kill()
            _check_invariants(env, name, parallelism)
            env.operator.start()
        _check_invariants(env, name, parallelism)
    assert env.status(name).get("state") == "Assembling", f"not assembling after 200 steps: {env.status(name)}"
    env.operator.kill()
    env.storage.put_text(f"{layout.submission(env.folder(name))}/submission_info.json", json.dumps({"submission_ready": 0.75, "counts": {"samples": 8}}))
    env.complete_job(name, "assemble")
    env.operator.start()
    _wait(lambda: env.status(name).get("state") == "Succeeded", 60, "Succeeded", 0.5)
    status = env.status(name)
    committed = env.committed(name)
    assert set(committed) <= set(samples)
    assert status["samples"]["succeeded"] + status["samples"]["failed"] == len(samples)
    assert status["samples"]["succeeded"] == sum(1 for a in committed.values() if any(s == "succeeded" for _, s in a))
    assert status["submissionReadyRate"] == 0.75 and status["progress"] == "8/8"
    _wait(lambda: not env.pods(name) and not env.jobs(name), 30, "children cleaned up")


def _waiting_for_go(pod) -> bool:
    return (pod.metadata.annotations or {}).get("gdpval.io/go") == ""


def _check_ahead(env: Env, name: str, parallelism: int, ahead: int) -> None:
    """At most `parallelism` live pods may call the model (given their go), at most `parallelism` start at once (wait
    not Ready), and no more wait than fill the window's room and `ahead` beyond it."""
    live = [p for p in env.pods(name) if p.status.phase in (None, "Pending", "Running") and not p.metadata.deletion_timestamp]
    waiting = [p for p in live if _waiting_for_go(p)]
    went = len(live) - len(waiting)
    assert went <= parallelism, f"{went} pods past their go > parallelism {parallelism}"
    assert len(waiting) <= parallelism - went + ahead, f"{len(waiting)} pods waiting > the window's room and startAhead {ahead}"
    starting = [p for p in waiting if not any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    assert len(starting) <= parallelism, f"{len(starting)} pods starting at once > parallelism {parallelism}"
    _check_invariants(env, name, parallelism + ahead)


def _go_to_first_pods(env: Env, name: str, samples: list[str], parallelism: int, ahead: int) -> None:
    """A fresh run starts only its window, every pod waiting for its go; once they are Ready they get it and the
    pods ahead start, for the next samples in queue order."""
    first = _wait(lambda: len(env.pods(name)) == parallelism and env.pods(name), 30, "the window's pods")
    assert all(_waiting_for_go(p) for p in first) and {_sample(p) for p in first} == set(samples[:parallelism])
    _check_ahead(env, name, parallelism, ahead)
    for pod in first:
        env.run_pod(pod, ready=True)
    pods = _wait(lambda: len(env.pods(name)) == parallelism + ahead and env.pods(name), 30, "the go and the pods ahead")
    assert {_sample(p) for p in pods if _waiting_for_go(p)} == set(samples[parallelism : parallelism + ahead])


def _sample(pod) -> str:
    return pod.metadata.annotations["gdpval.io/sample-id"]


def _running_or_assembling(env: Env, name: str, ready: set[str], queue: list[str]) -> list | str:
    """The pods the test plays the kubelet for that may call the model (not waiting for a go), or "Assembling".
    Pods waiting for their go run at once; when none may call and none waits Ready, the one last in queue order
    turns Ready (its agent waits ready): those before it, Running but still starting, must not get the go."""
    pending = _pending_or_assembling(env, name)
    if pending == "Assembling":
        return pending
    running = [p for p in pending if not _waiting_for_go(p)]
    waiting = sorted((p for p in pending if _waiting_for_go(p)), key=lambda p: queue.index(p.metadata.annotations["gdpval.io/sample-id"]))
    for pod in waiting:
        if pod.status.phase == "Pending":
            env.run_pod(pod, ready=False)
    if not running and waiting and not any(p.metadata.name in ready for p in waiting):
        env.run_pod(waiting[-1], ready=True)
        ready.add(waiting[-1].metadata.name)
    return running


def test_pods_started_ahead_get_their_go_in_queue_order_across_sigkills(env):
    """startAhead pods wait outside the window; a finished sample gives the next Ready one its go (and its deadline),
    through the real API server's merge patch, the operator killed at random points."""
    rng = random.Random(7)
    name, parallelism, ahead = "ahead", 2, 2
    env.create(name, parallelism=parallelism, samples={"startAhead": ahead, "backoffSeconds": 0})
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    samples = env.prepare(name, 7)
    _go_to_first_pods(env, name, samples, parallelism, ahead)
    went: set[str] = set(samples[:parallelism])
    ready: set[str] = {p.metadata.name for p in env.pods(name) if _sample(p) in went}
    for _ in range(40):
        live = _wait(lambda: _running_or_assembling(env, name, ready, samples), 60, "a live sample pod past its go or the run assembling")
        if live == "Assembling":
            break
        running = list(live)
        for pod in running:
            if "gdpval.io/go" in pod.metadata.annotations:
                went.add(pod.metadata.annotations["gdpval.io/sample-id"])
                assert pod.spec.active_deadline_seconds, "the go sets the deadline"
                assert pod.metadata.name in ready, f"{pod.metadata.name} got its go before it was Ready"
        env.finish_pod(rng.choice(running), "ok")
        if rng.random() < 0.4:
            time.sleep(rng.random() * 0.6)
            env.operator.kill()
            _check_ahead(env, name, parallelism, ahead)
            env.operator.start()
        _check_ahead(env, name, parallelism, ahead)
    assert env.status(name).get("state") == "Assembling", f"not assembling: {env.status(name)}"
    assert went >= set(samples[2:4]), f"the first pods ahead never got their go: {went}"
    assert set(env.committed(name)) == set(samples)
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def _pool_pods(env: Env) -> list:
    return [p for p in env.cp.core.list_namespaced_pod(NS, label_selector=n.L_POOL).items if not p.metadata.deletion_timestamp]


def _play_pool_kubelet(env: Env) -> None:
    """Pool pods start and their agent waits ready, as the kubelet would report."""
    for pod in _pool_pods(env):
        if pod.status.phase in (None, "Pending") and not pod.metadata.labels.get(n.L_CLAIMED):
            env.run_pod(pod, ready=True)


def _check_claims(env: Env, seen: dict[str, tuple[str, int]]) -> None:
    """Every claim names one (sample, attempt) and one pod, for good; no pod still its pool's holds a claim Secret."""
    for pod in _pool_pods(env):
        name, text = pod.metadata.name, (pod.metadata.annotations or {}).get(n.A_CLAIM)
        if text:
            claim = contract.Claim.parse(text)
            assert seen.setdefault(name, (claim.sample, claim.attempt)) == (claim.sample, claim.attempt), f"{name} claimed twice"
        elif pod.metadata.owner_references[0].kind == api.POOL_KIND and _found(env.cp.core.read_namespaced_secret, n.claim_secret_name(name)):
            now = env.cp.core.read_namespaced_pod(name, NS).metadata.owner_references[0]  # the lock comes before the Secret
            assert now.kind != api.POOL_KIND, f"{name} is in the pool with a claim Secret"
    attempts = list(seen.values())
    assert len(attempts) == len(set(attempts)), f"an attempt got two pool pods: {seen}"


def test_pool_claims_under_sigkills_claim_each_pod_once_and_clear_half_claims(env):
    """A run claims its pods from a pool while the operator is killed at random points: no pod serves two attempts,
    no attempt gets two pods, and a claim its claimer left halfway (pod held by the run, Secret made, never claimed) is
    never handed to a run and is deleted by the pool, restarts or not, within HALF_CLAIM_SECONDS of the last."""
    rng = random.Random(11)
    env.cp.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.POOL_PLURAL, pool_manifest("cp-pool", NS, images=IMAGES, size=3))
    _wait(lambda: len(_pool_pods(env)) == 3, 30, "three pool pods")
    _play_pool_kubelet(env)
    name, parallelism = "pooled", 2
    env.create(name, parallelism=parallelism, samples={"backoffSeconds": 0, "retries": 8}, failureBudget="100%")
    uid = env.run(name)["metadata"]["uid"]
    half = _pool_pods(env)[0]
    owner = {"apiVersion": api.API_VERSION, "kind": api.KIND, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}
    env.cp.core.patch_namespaced_pod(half.metadata.name, NS, pool.lock_patch(pool.parse_pooled(env.cp.core.api_client.sanitize_for_serialization(half)), owner))
    env.cp.core.create_namespaced_secret(NS, {"metadata": {"name": n.claim_secret_name(half.metadata.name)}, "stringData": {"claim-id": "x"}})
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    samples = env.prepare(name, 8)
    seen: dict[str, tuple[str, int]] = {}
    for _ in range(60):
        _play_pool_kubelet(env)
        live = _wait(lambda: _pending_or_assembling(env, name), 60, "a live sample pod or the run assembling")
        _check_claims(env, seen)
        if live == "Assembling":
            break
        pod = rng.choice(live)
        if pod.status.phase in (None, "Pending"):
            env.run_pod(pod, ready=True)
        env.finish_pod(pod, rng.choice(["ok", "ok", "crash"]))
        if rng.random() < 0.5:
            time.sleep(rng.random() * 0.3)
            env.operator.kill()
            _check_claims(env, seen)
            env.operator.start()
        _check_invariants(env, name, parallelism)
    assert env.status(name).get("state") == "Assembling", f"not assembling: {env.status(name)}"
    assert set(env.committed(name)) == set(samples)
    assert seen and half.metadata.name not in seen, f"claims: {seen}"
    gone = pool.HALF_CLAIM_SECONDS + 15
    _wait(lambda: half.metadata.name not in {p.metadata.name for p in _pool_pods(env)}, gone, "the half claim deleted by the pool")
    assert all(env.cp.core.read_namespaced_pod(p, NS).metadata.labels[n.L_RUN_UID] == uid for p in seen if _found(env.cp.core.read_namespaced_pod, p))
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.POOL_PLURAL, "cp-pool")


def _found(read, name: str) -> bool:
    """Whether the object `read` reads by name exists."""
    try:
        read(name, NS)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_a_run_out_of_budget_keeps_no_pod_ahead_and_a_raised_budget_starts_them_again(env):
    """Spent budget: the pods ahead are deleted (Event PodsAheadDeleted), their attempts unspent; the pod in the window
    finishes its sample. Raised: the same samples get pods again under attempt 1, ahead of their turn."""
    name, parallelism, ahead = "spent", 2, 2
    env.create(name, parallelism=parallelism, samples={"startAhead": ahead}, budget={"runTokens": 10})
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    samples = env.prepare(name, 6)
    _go_to_first_pods(env, name, samples, parallelism, ahead)
    env.finish_pod(next(p for p in env.pods(name) if _sample(p) == samples[0]), "ok")  # 10 tokens: spent
    _wait(lambda: env.condition(name, "BudgetExhausted").get("status") == "True", 30, "BudgetExhausted")
    left = _wait(lambda: not any(_waiting_for_go(p) for p in env.pods(name)) and env.pods(name), 30, "the pods ahead deleted")
    assert [_sample(p) for p in left if p.status.phase == "Running"] == [samples[1]], "the window's pod runs on"
    events = lambda: env.cp.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items  # noqa: E731
    _wait(lambda: any(e.reason == "PodsAheadDeleted" and "budget" in e.message for e in events()), 30, "Event PodsAheadDeleted")
    env.patch(name, {"budget": {"runTokens": 1000}})
    waiting = lambda: [p for p in env.pods(name) if _waiting_for_go(p) and not p.metadata.deletion_timestamp]  # noqa: E731
    again = _wait(lambda: len(waiting()) == ahead and waiting(), 30, "the pods ahead again")
    assert {(_sample(p), p.metadata.labels["gdpval.io/attempt"]) for p in again} == {(s, "1") for s in samples[2:4]}, "queued first, unspent"
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def test_restricted_admission_accepts_sample_pods(env):
    """The namespace enforces `restricted`: the pods exist, so admission accepted them."""
    name = "restricted"
    env.create(name, parallelism=2)
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.prepare(name, 2)
    pods = _wait(lambda: len(env.pods(name)) == 2 and env.pods(name), 30, "2 sample pods")
    spec = pods[0].spec
    assert spec.automount_service_account_token is False and spec.security_context.run_as_non_root
    containers = {c.name: c for c in spec.init_containers + spec.containers}
    assert containers["sandbox"].restart_policy == "Always"
    assert not containers["sandbox"].env, "the sandbox's only secret, its token, is a file from the run's Secret"
    policy = env.cp.net.list_namespaced_network_policy(NS).items
    assert any(p.spec.pod_selector.match_labels.get("gdpval.io/run-uid") == env.run(name)["metadata"]["uid"] for p in policy)
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def test_missing_secret_blocks_until_created(env):
    name = "blocked"
    env.create(name, output={"credentialsSecret": {"name": "late-secret"}})
    ready = _wait(lambda: env.condition(name, "Ready").get("reason") == "SecretNotFound" and env.condition(name, "Ready"), 30, "SecretNotFound")
    assert "late-secret" in ready["message"] and env.status(name)["state"] == "Blocked" and not env.jobs(name)
    secret = env.cp.core.read_namespaced_secret("s3-credentials", NS)
    env.cp.core.create_namespaced_secret(NS, {"metadata": {"name": "late-secret"}, "data": secret.data})
    # The Job is created before the pass writes its status: wait for both, not for the first alone.
    _wait(lambda: "prepare" in env.jobs(name) and env.status(name)["state"] == "Preparing", 60, "prepare Job and Preparing after the secret appeared")
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def test_suspend_parallelism_and_prepare_failure(env):
    name = "knobs"
    env.create(name, suspend=True, parallelism=1)
    _wait(lambda: env.condition(name, "Suspended").get("status") == "True", 30, "Suspended")
    assert not env.jobs(name)
    env.patch(name, {"suspend": False})
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.prepare(name, 5)
    _wait(lambda: len(env.pods(name)) == 1, 30, "one pod")
    env.patch(name, {"parallelism": 4})
    _wait(lambda: len(env.pods(name)) == 4, 30, "four pods")
    env.patch(name, {"suspend": True})
    generation = env.run(name)["metadata"]["generation"]
    _wait(
        lambda: env.status(name).get("observedGeneration") == generation and env.condition(name, "Suspended").get("status") == "True",
        30,
        "the operator to see the suspend",
    )
    # As a Job's suspend: the active pods are stopped, their attempts kept for the resume.
    _wait(lambda: not env.pods(name), 30, "the active pods stopped")
    assert env.status(name)["state"] == "Suspended" and env.status(name)["samples"]["running"] == 0
    env.patch(name, {"suspend": False})
    _wait(lambda: len(env.pods(name)) == 4, 30, "the stopped samples started again")
    assert {p.metadata.labels["gdpval.io/attempt"] for p in env.pods(name)} == {"1"}, "a suspension costs no attempt"
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)

    name = "badprep"
    env.create(name)
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.complete_job(name, "prepare", failed=True)
    failed = _wait(lambda: env.condition(name, "Failed").get("status") == "True" and env.condition(name, "Failed"), 30, "Failed")
    assert failed["reason"] == "PrepareFailed" and "kubectl logs job/" in failed["message"]


def test_suspend_reaches_the_running_job(env):
    """A run suspended while its prepare Job runs suspends that Job (the Job controller stops its pod), and resumes it."""
    name = "pausedprep"
    env.create(name)
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.patch(name, {"suspend": True})
    _wait(lambda: env.jobs(name)["prepare"].spec.suspend is True and env.status(name).get("state") == "Suspended", 30, "the Job suspended with the run")
    env.patch(name, {"suspend": False})
    _wait(lambda: env.jobs(name)["prepare"].spec.suspend is False and env.status(name).get("state") == "Preparing", 30, "the Job resumed with the run")
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def test_a_failed_run_is_finished_and_deleted_after_its_ttl(env):
    """`kubectl wait --for=condition=Finished` returns on failure too; ttlSecondsAfterFinished then deletes the run."""
    name = "shortlived"
    env.create(name, ttlSecondsAfterFinished=5)
    _wait(lambda: "prepare" in env.jobs(name) and env.condition(name, "Finished").get("status") == "False", 30, "prepare Job, Finished False")
    env.complete_job(name, "prepare", failed=True)
    finished = _wait(lambda: env.condition(name, "Finished").get("status") == "True" and env.condition(name, "Finished"), 30, "Finished")
    assert finished["reason"] == "PrepareFailed" and env.status(name)["state"] == "Failed"
    runs = lambda: [r["metadata"]["name"] for r in env.cp.custom.list_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL)["items"]]  # noqa: E731
    _wait(lambda: name not in runs(), 60, "the run deleted by its TTL")


def test_stuck_pod_is_replaced_and_reported(env):
    name = "stuck"
    env.create(name, parallelism=1, samples={"pendingTimeoutSeconds": 30, "retries": 0}, failureBudget=0)
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    env.prepare(name, 2)
    pod = _wait(lambda: env.pods(name) and env.pods(name)[0], 30, "a pod")
    waiting = {"waiting": {"reason": "InvalidImageName", "message": "couldn't parse image name"}}
    env.cp.core.patch_namespaced_pod_status(
        pod.metadata.name,
        NS,
        {
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [{"name": "stage", "image": "x", "imageID": "", "ready": False, "restartCount": 0, "state": waiting}],
            }
        },
    )
    failed = _wait(lambda: env.condition(name, "Failed").get("status") == "True" and env.condition(name, "Failed"), 30, "Failed")
    assert failed["reason"] == "FailureBudgetExceeded" and "InvalidImageName" in failed["message"]

    def stuck_event() -> bool:
        events = env.cp.core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
        return any(e.reason == "PodStuck" and "InvalidImageName" in e.message for e in events)

    _wait(stuck_event, 30, "a PodStuck Event (posted after the status write)")


def test_run_deletes_without_finalizer_while_the_operator_is_down(env):
    name = "orphan-check"
    env.create(name)
    _wait(lambda: "prepare" in env.jobs(name), 30, "prepare Job")
    run = env.run(name)
    assert not run["metadata"].get("finalizers") and not any(k.startswith("kopf.") for k in run["metadata"].get("annotations", {}))
    ledger = env.cp.core.read_namespaced_config_map(f"{name}-ledger", NS)
    assert ledger.metadata.owner_references[0].uid == run["metadata"]["uid"]
    env.operator.kill()
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)
    with pytest.raises(ApiException):
        env.run(name)
    env.operator.start()


@pytest.mark.parametrize("case,mutate,message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_specs_are_rejected(env, case, mutate, message):
    manifest = run_manifest(
        "invalid",
        NS,
        model_url="http://10.250.0.1:8000/v1",
        dataset=f"s3://{env.bucket}/dataset",
        output_url=f"s3://{env.bucket}/out",
        endpoint=env.endpoint,
        images=IMAGES,
    )
    mutate(manifest)
    with pytest.raises(ApiException) as refused:
        env.cp.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, manifest, dry_run="All")
    assert message in json.loads(refused.value.body)["message"], case


def test_pinned_fields_are_immutable(env):
    name = "pinned"
    env.create(name, suspend=True)
    for field in ("model", "selection", "dataset", "output", "agent"):
        change = {
            "model": {"name": "other"},
            "selection": {"limit": 1},
            "dataset": {"split": "test"},
            "output": {"region": "eu-west-1"},
            "agent": {"maxSteps": 3},
        }[field]
        with pytest.raises(ApiException) as refused:
            env.patch(name, {field: change})
        assert f"spec.{field} is immutable" in json.loads(refused.value.body)["message"]
    env.patch(name, {"parallelism": 7, "failureBudget": 2, "suspend": False})
    assert env.run(name)["spec"]["parallelism"] == 7
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)


def _passes(replica: OperatorProcess) -> float:
    """Reconcile passes the replica ended (its /metrics is served from its start, standby included)."""
    text = replica.metrics()
    return float(next(line.split()[-1] for line in text.splitlines() if line.startswith("gdpval_reconcile_duration_seconds_count")))


def test_two_replicas_with_leader_election_never_both_act(env, tmp_path):
    """Two operators on one namespace: only the Lease holder reconciles; killed, the other takes over."""
    ns, name, coordination = "cp-le", "elected", client.CoordinationV1Api(env.cp.core.api_client)
    env.cp.core.create_namespace({"metadata": {"name": ns}})
    env.cp.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    keys = env.cp.core.read_namespaced_secret("s3-credentials", NS)
    env.cp.core.create_namespaced_secret(ns, {"metadata": {"name": "s3-credentials"}, "data": keys.data})
    replicas = {
        who: OperatorProcess(str(env.cp.kubeconfig), ns, *IMAGES, tmp_path / who, extra_args=("--leader-elect", "--lease-namespace", ns), hostname=who)
        for who in ("alpha", "beta")
    }
    for who, replica in replicas.items():
        (tmp_path / who).mkdir()
        replica.start()
    try:

        def holder() -> str:
            try:
                return coordination.read_namespaced_lease("gdpval-operator", ns).spec.holder_identity or ""
            except ApiException:
                return ""

        leader = _wait(lambda: holder() in replicas and holder(), 60, "a Lease holder")
        for replica in replicas.values():
            replica.wait_serving()
        standby = next(who for who in replicas if who != leader)
        manifest = run_manifest(
            name,
            ns,
            model_url="http://10.250.0.1:8000/v1",
            dataset=f"s3://{env.bucket}/dataset",
            output_url=f"s3://{env.bucket}/out",
            endpoint=env.endpoint,
            images=IMAGES,
        )
        env.cp.custom.create_namespaced_custom_object(api.GROUP, api.VERSION, ns, api.PLURAL, manifest)
        jobs = lambda: env.cp.batch.list_namespaced_job(ns, label_selector=f"gdpval.io/run={name}").items  # noqa: E731
        first = _wait(lambda: jobs() and jobs()[0], 30, "the leader's prepare Job")
        _wait(lambda: _passes(replicas[leader]) > 0, 30, "the leader's passes")
        assert _passes(replicas[standby]) == 0 and holder() == leader, "the standby reconciles nothing while the leader renews"
        replicas[leader].kill()
        _wait(lambda: holder() == standby, 60, "the standby to take the Lease over")
        env.cp.batch.delete_namespaced_job(first.metadata.name, ns, propagation_policy="Background")
        _wait(lambda: jobs() and jobs()[0].metadata.uid != first.metadata.uid, 60, "the new leader to act (its prepare Job)")
        _wait(lambda: _passes(replicas[standby]) > 0, 30, "the new leader's passes")
        replicas[standby].stop()
        _wait(lambda: holder() == "", 30, "a clean stop to hand the Lease back")
    finally:
        for replica in replicas.values():
            replica.kill()
        env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, ns, api.PLURAL, name)


def _workload(env: Env, name: str) -> dict | None:
    wl_name = queue.workload_name(name, env.run(name)["metadata"]["uid"])
    try:
        return env.cp.custom.get_namespaced_custom_object(queue.GROUP, queue.VERSION, NS, queue.PLURAL, wl_name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _kueue_writes(env: Env, name: str, *conditions: tuple[str, str, str], admitted: bool) -> None:
    """What Kueue's scheduler writes: quota reserved and admitted (or an eviction on top), in one status update."""
    wl = _workload(env, name)
    assert wl is not None
    now = _now()
    wl["status"] = {"conditions": [{"type": t, "status": s, "reason": r, "message": f"{r} by the test", "lastTransitionTime": now} for t, s, r in conditions]}
    if admitted:
        assignment = {"name": "sample", "flavors": {"cpu": "default"}, "count": wl["spec"]["podSets"][0]["count"]}
        wl["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [assignment]}
    env.cp.custom.replace_namespaced_custom_object_status(queue.GROUP, queue.VERSION, NS, queue.PLURAL, wl["metadata"]["name"], wl)


def _condition_of(obj: dict | None, type_: str) -> dict:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions", []) if c["type"] == type_), {})


ADMIT = (("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"))


def test_a_run_labelled_for_a_kueue_queue_is_one_workload_admitted_evicted_and_finished(env, kueue):
    """Kueue's part played by the test (its Workload CRD, no manager): without the CRD the run says so;
    with it, one Workload holds the run until admitted, an eviction stops its pods and gives the quota
    back, a second admission resumes the same attempts, and the run's end marks the Workload Finished."""
    name = "queued"
    env.create(name, labels={workload.QUEUE_LABEL: "team-a"}, parallelism=2, failureBudget=0, samples={"retries": 0})
    ready = _wait(lambda: env.condition(name, "Ready").get("reason") == "KueueNotInstalled" and env.condition(name, "Ready"), 30, "KueueNotInstalled")
    assert "Kueue queue team-a" in ready["message"] and not env.jobs(name)
    crd = yaml.safe_load((kueue / "crd" / "kueue.x-k8s.io_workloads.yaml").read_text())
    env.cp.ext.create_custom_resource_definition(crd)
    wl = _wait(lambda: _workload(env, name), 60, "the run's Workload")
    owner = wl["metadata"]["ownerReferences"][0]
    assert owner["controller"] and owner["uid"] == env.run(name)["metadata"]["uid"] and wl["spec"]["queueName"] == "team-a"
    assert wl["spec"]["podSets"][0]["count"] == 2
    _wait(lambda: env.condition(name, "Suspended").get("reason") == queue.QUEUED, 30, "the run waiting for admission")
    assert "waiting for admission by Kueue in queue team-a" in env.condition(name, "Ready")["message"] and not env.jobs(name)

    _kueue_writes(env, name, *ADMIT, admitted=True)
    _wait(lambda: "prepare" in env.jobs(name), 30, "the prepare Job once admitted")
    env.prepare(name, 3)
    _wait(lambda: len(env.pods(name)) == 2, 30, "two sample pods")

    _kueue_writes(env, name, *ADMIT, ("Evicted", "True", "Preempted"), admitted=True)
    _wait(lambda: not env.pods(name), 30, "the evicted run's pods stopped")
    released = _wait(lambda: _condition_of(_workload(env, name), "QuotaReserved").get("status") == "False" and _workload(env, name), 30, "the quota given back")
    assert "admission" not in released["status"] and _condition_of(released, "Requeued")["status"] == "True"
    assert env.condition(name, "Suspended")["reason"] == queue.EVICTED and env.status(name)["samples"]["failed"] == 0

    _kueue_writes(env, name, *ADMIT, admitted=True)
    pods = _wait(lambda: len(env.pods(name)) == 2 and env.pods(name), 30, "the samples started again")
    assert {p.metadata.labels["gdpval.io/attempt"] for p in pods} == {"1"}, "an eviction costs no attempt"
    env.finish_pod(pods[0], "bad")
    _wait(lambda: env.status(name).get("state") == "Failed", 30, "the run failed on its budget")
    finished = _wait(lambda: _condition_of(_workload(env, name), "Finished"), 30, "the Workload Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Failed")
    env.cp.custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, NS, api.PLURAL, name)

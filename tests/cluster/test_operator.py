"""The operator on the real local cluster: GdpvalRuns over the 12-task sample, end to end.

The operator runs as a separate process (SIGKILL-able), pods use the locally built images, the
model is the scripted fake model and storage is MinIO, both on the node address. The namespace
enforces the `restricted` Pod Security Standard, so every pod the operator makes is checked.
"""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest
from operator_support import (
    INVALID,
    Kube,
    OperatorProcess,
    assert_committed_once,
    operator_namespace,
    result_keys,
    run_folder,
    run_manifest,
)

from gdpval.fakemodel.script import parse_inventory
from gdpval.fakemodel.server import start_background
from support.cli import SUBMISSION_COLUMNS, gdpval
from support.standins import make_standin_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 600
TASKS = 12


@pytest.fixture(scope="module")
def env(cluster, cluster_s3, sample_dataset, tmp_path_factory):
    """A restricted namespace with the CRD, S3 credentials, the dataset in MinIO and the operator."""
    dataset = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset"))
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-op", dataset, tmp_path_factory.mktemp("operator")) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
    ):
        yield Env(ns.kube, ns.operator, ns.bucket, ns.client, ns.endpoint, model.base_url, cluster.node_ip, dataset, ns.images)


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

    def assert_complete_submission(self, run: str) -> None:
        """The checks of the local run's test: columns, every task once, files there, references seen whole."""
        table = self.submission_table(run)
        assert table.column_names == SUBMISSION_COLUMNS
        rows = table.to_pylist()
        task_ids = [r["task_id"] for r in rows]
        assert len(rows) == TASKS and len(set(task_ids)) == TASKS, task_ids
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
        assert len(committed) == TASKS
        assert_committed_once(committed)


def test_run_reaches_succeeded_and_shows_progress(env):
    name = env.submit("happy")
    seen = env.kube.wait_for(
        lambda: "/12" in env.kube.run("get", "gdpvalruns", check=False).stdout and env.kube.run("get", "gdpvalruns", check=False).stdout, 180, "progress column"
    )
    assert "PROGRESS" in seen and "STATE" in seen
    env.wait_condition(name, "Succeeded")
    status = env.kube.run_status(name)
    assert status["state"] == "Succeeded" and status["progress"] == "12/12"
    assert status["samples"]["succeeded"] == TASKS and status["samples"]["failed"] == 0
    assert status["storageURI"].endswith(f"/out/runs/{run_folder(status)}") and run_folder(status).startswith(f"{env.kube.namespace}.{name}-")
    assert status["submissionURI"] == f"{status['storageURI']}/submission" and status["submissionReadyRate"] == 1.0
    assert status["datasetRevision"] and status["tokens"]["input"] > 0 and status["observedGeneration"] >= 1
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    env.assert_complete_submission(name)
    assert status["reportURI"] == f"{status['storageURI']}/report.html"  # written by the assemble Job
    page = env.client.get_object(Bucket=env.bucket, Key=f"out/runs/{run_folder(status)}/report.html")["Body"].read().decode()
    assert f"samples<b>{TASKS}</b>" in page and page.count('<details class="sample"') == TASKS
    shown = gdpval("status", "--gdpvalrun", name, "--namespace", env.kube.namespace, env={"KUBECONFIG": env.kube.kubeconfig})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[1].startswith(f"done {TASKS}/{TASKS}  running 0  failed 0  tokens in ") and f"report {status['reportURI']}" in shown.stdout
    env.kube.wait_for(lambda: not env.sample_pods(name), 60, "sample pods deleted after commit")
    policies = (env.kube.get("networkpolicies") or {}).get("items", [])
    assert any(p["metadata"]["ownerReferences"][0]["name"] == name and not p["spec"].get("ingress") and "Ingress" in p["spec"]["policyTypes"] for p in policies)
    events = env.kube.run("get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "name").stdout
    assert events.strip()


def test_operator_sigkill_at_three_points(env):
    """Killed during prepare, mid-samples and during assembly; each time the run's children finish
    while the operator is down, and the restarted operator picks the run up from there."""
    with start_background(host=env.node_ip, port=0, latency=0.4) as slow:
        name = env.submit("crashy", model_url=slow.base_url, parallelism=3)
        kube = env.kube
        env.wait_for_job(name, "prepare")
        env.operator.kill()
        env.wait_for_job(name, "prepare", finished=True)
        env.operator.start()
        kube.wait_for(lambda: env.progress(name) >= 3 and env.pods_in(name, "Running"), RUN_TIMEOUT, "3 samples done, more running")
        env.operator.kill()
        kube.wait_for(lambda: env.pods_in(name, "Succeeded", "Failed"), RUN_TIMEOUT, "a sample pod finished while the operator is down")
        env.operator.start()
        env.wait_for_job(name, "assemble")
        env.operator.kill()
        env.wait_for_job(name, "assemble", finished=True)
        env.operator.start()
        env.wait_condition(name, "Succeeded")
    env.assert_complete_submission(name)
    env.kube.wait_for(lambda: not env.sample_pods(name), 60, "no pod left behind")
    for pod in (kube.get("pods") or {}).get("items", []):
        assert pod["metadata"].get("ownerReferences"), f"orphan pod {pod['metadata']['name']}"


def test_deleted_sample_pod_is_retried(env):
    """A slow model keeps the agent mid-loop, so the deleted pod cannot commit before it dies."""
    with start_background(host=env.node_ip, port=0, latency=1.0) as slow:
        name = env.submit("deleted", model_url=slow.base_url, parallelism=2)
        kube = env.kube
        victim = kube.wait_for(
            lambda: next((p["metadata"]["name"] for p in env.sample_pods(name) if p.get("status", {}).get("phase") == "Running"), None),
            RUN_TIMEOUT,
            "a running sample pod",
            0.2,
        )
        kube.run("delete", "pod", victim, "--grace-period=1", "--wait=false")
        env.wait_condition(name, "Succeeded")
    status = kube.run_status(name)
    assert status["samples"]["retried"] >= 1 and status["samples"]["succeeded"] == TASKS
    env.assert_complete_submission(name)


def test_model_faults_exhaust_retries_and_the_budget(env):
    """Every request fails with context_length: each sample fails twice, the budget of 2 is exceeded."""
    faults = {"extraBody": {"fake_faults": {"context_length": 1.0}}}
    name = env.submit("faulty", model={"name": "scripted", "baseURL": env.model_url, **faults}, failureBudget=2, parallelism=3)
    env.wait_condition(name, "Failed")
    status = env.kube.run_status(name)
    failed = {c["type"]: c for c in status["conditions"]}["Failed"]
    assert failed["reason"] == "FailureBudgetExceeded" and "context_length" in failed["message"] and "budget of 2" in failed["message"]
    assert status["samples"]["failed"] >= 3 and status["samples"]["retried"] >= 3
    committed = result_keys(env.client, env.bucket, "out", run_folder(status))
    assert committed and all([a for a, _ in attempts] in ([1], [1, 2]) for attempts in committed.values()), committed
    assert all(status == "failed" for attempts in committed.values() for _, status in attempts)
    env.kube.wait_for(lambda: not [p for p in env.sample_pods(name) if p["status"].get("phase") in ("Pending", "Running")], 120, "live pods stopped")


def test_suspend_and_parallelism_changes_apply(env):
    name = env.submit("paused", suspend=True)
    kube = env.kube
    kube.wait_for(lambda: kube.condition(name, "Suspended").get("status") == "True", 60, "Suspended condition")
    kube.wait_for(lambda: kube.run_status(name).get("state") == "Suspended" or None, 60, "suspended state")
    assert not env.sample_pods(name)
    kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"suspend":false,"parallelism":6}}')
    kube.wait_for(lambda: len(env.sample_pods(name)) > 4, 120, "more than 4 pods with parallelism 6", 0.3)
    env.wait_condition(name, "Succeeded")


@pytest.mark.parametrize("case,mutate,message", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_specs_are_rejected_by_the_api_server(env, case, mutate, message):
    manifest = env.manifest("invalid")
    mutate(manifest)
    done = env.kube.apply(manifest, "--dry-run=server", check=False)
    assert done.returncode != 0, f"{case} was accepted"
    assert message in done.stderr, done.stderr


def test_pinned_fields_are_immutable(env):
    name = env.submit("pinned", suspend=True)
    done = env.kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"model":{"name":"other"}}}', check=False)
    assert done.returncode != 0 and "spec.model is immutable" in done.stderr
    done = env.kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"selection":{"limit":2}}}', check=False)
    assert done.returncode != 0 and "spec.selection is immutable" in done.stderr
    env.kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"parallelism":2,"failureBudget":"50%"}}')
    env.kube.run("delete", "gdpvalrun", name, "--wait=true", timeout=60)


@pytest.mark.parametrize(
    "secret,reason,hint",
    [
        ({"output": {"credentialsSecret": {"name": "no-such-secret"}}}, "SecretNotFound", "no-such-secret"),
        ({"model": {"name": "scripted", "apiKeySecretRef": {"name": "s3-credentials", "key": "api-key"}}}, "SecretKeyNotFound", "api-key"),
    ],
)
def test_missing_secrets_are_reported_in_conditions(env, secret, reason, hint):
    name = f"nosecret-{reason.lower()}"
    manifest = env.manifest(name)
    for key, value in secret.items():
        manifest["spec"][key] = {**manifest["spec"][key], **value}
    env.kube.apply(manifest)
    ready = env.kube.wait_for(lambda: env.kube.condition(name, "Ready").get("reason") == reason and env.kube.condition(name, "Ready"), 60, reason)
    assert hint in ready["message"] and ready["status"] == "False"
    assert env.kube.run_status(name)["state"] == "Blocked"
    assert not (env.kube.get("jobs", selector=f"gdpval.io/run={name}") or {}).get("items")
    env.kube.run("delete", "gdpvalrun", name, "--wait=true", timeout=60)


def test_metrics_endpoint(env):
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{env.operator.metrics_port}/metrics", timeout=5).read().decode()
    assert "gdpval_reconcile_duration_seconds_count" in text and "gdpval_samples{" in text

"""The operator on the real local cluster: GdpvalRuns over the 12-task sample, end to end.

The operator runs as a separate process (SIGKILL-able), pods use the locally built images, the
model is the scripted fake model and storage is MinIO, both on the node address. The namespace
enforces the `restricted` Pod Security Standard, so every pod the operator makes is checked.
"""

from __future__ import annotations

import pytest

from gdpval.fakemodel.server import start_background
from support.cli import gdpval
from support.operator import (
    INVALID,
    RUN_TIMEOUT,
    TASKS,
    result_keys,
    run_folder,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
DELETED_TASKS = 4


@pytest.mark.long
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


@pytest.mark.long
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
    for pod in (kube.get("pods", selector="app!=bystander") or {}).get("items", []):  # the shared namespace's policy-test pod aside
        assert pod["metadata"].get("ownerReferences"), f"orphan pod {pod['metadata']['name']}"


def test_deleted_sample_pod_is_retried(env):
    """A slow model keeps the agent mid-loop, so the deleted pod cannot commit before it dies. Four tasks: two waves
    at the model's pace are enough (all 12 took 160 s, the cluster tier's second-longest test)."""
    with start_background(host=env.node_ip, port=0, latency=1.0) as slow:
        name = env.submit("deleted", model_url=slow.base_url, parallelism=2, selection={"limit": DELETED_TASKS})
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
    assert status["samples"]["retried"] >= 1 and status["samples"]["succeeded"] == DELETED_TASKS
    env.assert_complete_submission(name, DELETED_TASKS)


@pytest.mark.long
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
    """A run of its own (suspended: no pods), since the session's other runs may not have come yet: its gauges
    once the operator reconciled it, the pass histogram, and no gauge left once it is deleted."""
    name = env.submit("metered", suspend=True)
    run = f'namespace="{env.kube.namespace}",run="{name}"'

    def reconciled() -> str | None:
        text = env.operator.metrics()
        return text if f'gdpval_run_info{{{run},state="Suspended"}} 1' in text else None

    text = env.kube.wait_for(reconciled, 60, "the run's gauges")
    assert f'gdpval_samples{{{run},state="pending"}}' in text and "gdpval_reconcile_duration_seconds_count" in text
    env.kube.run("delete", "gdpvalrun", name, "--wait=true", timeout=60)
    env.kube.wait_for(lambda: f'run="{name}"' not in env.operator.metrics(), 60, "the deleted run's gauges to go")

"""GdpvalPool on the real local cluster: pods started with nothing of any run, claimed one sample each, refilled.

Two runs back to back claim from one pool: every claimed pod serves exactly one sample of one run (never returned to
the pool), a pod in the pool holds no credential and no claim Secret until its claim, and the pool shows its counts.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from gdpval import contract
from gdpval.api import v1alpha1 as api
from gdpval.controller.pure import names as n
from support.operator import pool_manifest
from support.watching import EventRecorder, api_client

pytestmark = [pytest.mark.cluster]
POOL, SIZE, TASKS = "warm", 3, 4


def _pool_status(env) -> dict:
    return (env.kube.get("gdpvalpool", POOL) or {}).get("status") or {}


def _free(env) -> list[dict]:
    pods = (env.kube.get("pods", selector=f"{n.L_POOL}={POOL},{n.L_CLAIMED}=") or {}).get("items", [])
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _assert_holds_nothing(env, pod: dict) -> None:
    """A pod in the pool: no claim Secret, no credential in any container's environment, the sandbox without the claim folder."""
    name = pod["metadata"]["name"]
    assert env.kube.get("secret", n.claim_secret_name(name)) is None, f"{name} has a claim Secret while in the pool"
    for container in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]:
        names = {e["name"] for e in container.get("env", [])}
        assert not names & {contract.API_KEY_ENV, *contract.S3_KEY_ENVS, "AWS_ENDPOINT_URL"}, f"{name}/{container['name']}: {names}"
        if container["name"] == "sandbox":
            assert all(m["mountPath"] != contract.CLAIM_DIR for m in container["volumeMounts"]), "the sandbox sees the claim folder"
    assert not pod["metadata"]["annotations"].get(n.A_CLAIM)


@pytest.fixture
def pool(env):
    """The pool, deleted after the test (with its pods): other tests' runs in the namespace must not claim from it."""
    env.kube.apply(pool_manifest(POOL, env.kube.namespace, images=env.images, size=SIZE))
    yield POOL
    env.kube.run("delete", "gdpvalpool", POOL, "--wait=false", check=False)


def test_two_runs_claim_pool_pods_one_sample_each(env, pool):
    env.kube.wait_for(lambda: _pool_status(env).get("ready") == SIZE, 300, f"{SIZE} pool pods ready", 0.5)
    for pod in _free(env):
        _assert_holds_nothing(env, pod)
    recorder = EventRecorder(client.CoreV1Api(api_client(env.kube.kubeconfig)).list_namespaced_pod, env.kube.namespace, label_selector=f"{n.L_POOL}={POOL}")
    recorder.start()
    try:
        for run in ("pool-a", "pool-b"):
            env.submit(run, parallelism=SIZE, selection={"limit": TASKS})
            env.wait_condition(run, "Succeeded")
            env.assert_complete_submission(run, TASKS)
    finally:
        recorder.stop()
    claims: dict[str, set[tuple[str, str, int]]] = {}
    for _, pod in recorder.events:
        text = pod["metadata"].get("annotations", {}).get(n.A_CLAIM)
        if text:
            claim = contract.Claim.parse(text)
            claims.setdefault(pod["metadata"]["name"], set()).add((claim.run, claim.sample, claim.attempt))
    assert claims, "no run claimed a pool pod"
    assert all(len(served) == 1 for served in claims.values()), f"a pod served more than one sample: {claims}"
    runs = {run for served in claims.values() for run, _, _ in served}
    assert len(runs) == 2, f"both runs claim from the pool: {runs}"
    assert len({s for served in claims.values() for s in served}) == len(claims), "an attempt was claimed twice"
    env.kube.wait_for(lambda: _pool_status(env).get("ready") == SIZE and _pool_status(env).get("claimed") == 0, 300, "the pool refilled", 0.5)
    fresh = _free(env)
    assert not {p["metadata"]["name"] for p in fresh} & set(claims), "a claimed pod went back to the pool"
    for pod in fresh:
        _assert_holds_nothing(env, pod)
    status = _pool_status(env)
    assert status["size"] == SIZE and status["shape"] and status["starting"] == 0
    listed = client.CustomObjectsApi(api_client(env.kube.kubeconfig)).list_namespaced_custom_object(api.GROUP, api.VERSION, env.kube.namespace, api.POOL_PLURAL)
    assert [p["metadata"]["name"] for p in listed["items"]] == [POOL], json.dumps(listed)[:500]

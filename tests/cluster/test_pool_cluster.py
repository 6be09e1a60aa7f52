"""GdpvalPool on the real local cluster: pods started with nothing of any run, claimed one sample each, refilled.

Two runs back to back claim from one pool: every claimed pod serves exactly one sample of one run (never returned to
the pool), a pod in the pool holds no credential and no claim Secret until its claim, and the pool shows its counts.
The second run's model hunts, from inside each claimed sandbox, for the first run's traces and any credential.
"""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client

from gdpval import contract
from gdpval.api import v1alpha1 as api
from gdpval.controller.pure import names as n
from support.gold_search import WALK, found
from support.operator import pool_manifest, run_folder
from support.watching import EventRecorder, api_client

pytestmark = [pytest.mark.cluster]
POOL, SIZE, TASKS = "warm", 3, 4
TRACE = "TRACE-HUNT "
# What a claimed sandbox's code finds of any run: files (and process environments) holding a marker, environment
# variable names, the claim folder, a service-account token. Markers come base64-encoded: its own code, which the
# sandbox may keep in a file, never matches.
HUNT = (
    WALK
    + r"""
import base64, json
marks = [base64.b64decode(m) for m in MARKS]
hits, read, names = [], 0, set()
for path, data in walked("/", 50_000_000):
    if data is not None:
        read += 1
        hits += [path] if any(m in data for m in marks) else []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        continue
    names |= {v.split(b"=", 1)[0].decode(errors="replace") for v in data.split(b"\0") if v}
    hits += [f"/proc/{pid}/environ"] if any(m in data for m in marks) else []
with open("/proc/self/mountinfo") as handle:
    mounted = CLAIM in handle.read()
token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount")
print(PREFIX + json.dumps({"read": read, "hits": hits, "env": sorted(names), "claim": mounted or os.path.exists(CLAIM), "token": token}))
"""
)


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


def _hunt(env, earlier: str) -> str:
    """The hunt as python_exec code, marking the S3 keys of the namespace (every run's), the earlier run's uid and
    storage folder."""
    keys = (env.kube.get("secret", "s3-credentials") or {}).get("data", {})
    status = env.kube.run_status(earlier)
    own = [env.kube.get("gdpvalrun", earlier)["metadata"]["uid"], run_folder(status)]
    marks = [*keys.values(), *(base64.b64encode(m.encode()).decode() for m in own)]
    assert len(marks) == 4, marks
    return HUNT.replace("MARKS", repr(marks)).replace("CLAIM", repr(contract.CLAIM_DIR)).replace("PREFIX", repr(TRACE))


def _assert_no_trace(env, run: str) -> None:
    """Every sample of `run` ran the hunt in its claimed sandbox and found nothing."""
    prefix = f"out/runs/{run_folder(env.kube.run_status(run))}/samples/"
    listed = env.client.list_objects_v2(Bucket=env.bucket, Prefix=prefix).get("Contents", ())
    transcripts = [o["Key"] for o in listed if o["Key"].endswith("/transcript.jsonl")]
    assert len(transcripts) == TASKS, transcripts
    for key in transcripts:
        report = found(env.client.get_object(Bucket=env.bucket, Key=key)["Body"].read().decode(), TRACE)
        assert report["read"] > 100 and report["hits"] == [], report
        assert not {contract.API_KEY_ENV, *contract.S3_KEY_ENVS, "AWS_ENDPOINT_URL"} & set(report["env"]), report
        assert not report["claim"] and not report["token"], report


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
        env.submit("pool-a", parallelism=SIZE, selection={"limit": TASKS})
        env.wait_condition("pool-a", "Succeeded")
        env.assert_complete_submission("pool-a", TASKS)
        env.submit("pool-b", parallelism=SIZE, selection={"limit": TASKS}, model={"extraBody": {"fake_script": [{"python_exec": _hunt(env, "pool-a")}]}})
        env.wait_condition("pool-b", "Succeeded")
    finally:
        recorder.stop()
    _assert_no_trace(env, "pool-b")
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

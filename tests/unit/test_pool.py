"""A GdpvalPool's pure parts: the pod's shape, the pooled pod, the claim's steps and the pool's decision."""

from __future__ import annotations

import json
from dataclasses import replace

from gdpval import contract
from gdpval.api.v1alpha1 import GdpvalPoolSpec, GdpvalRunSpec, PodDefaults
from gdpval.controller.effects.claims import Claimer
from gdpval.controller.pure import manifests, pool
from gdpval.controller.pure import names as n

IMAGES = ("agent:1", "sandbox:1")
RUN = {"model": {"name": "m", "baseURL": "http://10.0.0.1:8000/v1"}, "output": {"url": "s3://b/out", "endpoint": "http://10.0.0.2:9000"}}


def run_ctx(**spec) -> manifests.RunContext:
    return manifests.RunContext("r", "ns", "run-uid", GdpvalRunSpec.model_validate({**RUN, **spec}), *IMAGES)


def pool_ctx(**spec) -> manifests.RunContext:
    return pool.pool_context("warm", "ns", "pool-uid", GdpvalPoolSpec.model_validate({"size": 2, **spec}), *IMAGES, PodDefaults())


def view(name: str, shape: str = "s", claimed: str = "", held: bool = False, ready: bool = True, phase: str = "Running", **kw) -> pool.PooledView:
    base = {"uid": f"uid-{name}", "pool": "warm", "owner": "pool-uid", "deleting": False, "created": 0.0}
    return pool.PooledView(name=name, shape=shape, claimed=claimed, held=held, phase=phase, ready=ready, **{**base, **kw})


def test_a_run_matches_a_pool_of_its_own_pod_shape_and_no_other():
    shape = pool.shape_hash(pool_ctx())
    assert pool.shape_hash(run_ctx(), {}) == shape, "a default run with its endpoints by address matches a default pool"
    assert pool.shape_hash(run_ctx(sandbox={"memoryMiB": 8192}), {}) != shape
    assert pool.shape_hash(run_ctx(pod={"nodeSelector": {"gpu": "yes"}}), {}) != shape
    assert pool.shape_hash(replace(run_ctx(), sandbox_image="other:2"), {}) != shape
    named = run_ctx(model={"name": "m", "baseURL": "https://api.example.com/v1"})
    assert pool.shape_hash(named, None) != shape, "a network-off run whose endpoint did not resolve needs DNS: no pooled pod has it"
    assert pool.shape_hash(named, {"api.example.com": ["10.0.0.9"]}) == shape, "resolved, its endpoints are pinned as a pooled pod's are"
    assert pool.shape_hash(run_ctx(sandbox={"network": True}), {}) == pool.shape_hash(pool_ctx(sandbox={"network": True}))


def test_a_pooled_pod_holds_nothing_of_a_run():
    ctx = pool_ctx()
    pod = pool.pooled_pod(ctx, pool.shape_hash(ctx), "abcd1234")
    text = json.dumps(pod)
    for secret in ("s3-credentials", contract.API_KEY_ENV, "AWS_", "--run-name", "--sample", "--output"):
        assert secret not in text, secret
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["sandbox"] and [c["name"] for c in spec["containers"]] == ["agent"]
    sandbox = spec["initContainers"][0]
    assert all(m["name"] != "claim" for m in sandbox["volumeMounts"]), "the sandbox never sees the claim folder"
    assert {e["name"] for e in sandbox.get("env", [])} <= {"HOME"}
    claim = next(v for v in spec["volumes"] if v["name"] == "claim")["projected"]["sources"]
    assert claim[1]["secret"] == {"name": n.claim_secret_name(pod["metadata"]["name"]), "optional": True}
    assert "activeDeadlineSeconds" not in spec and spec["dnsPolicy"] == "None" and "hostAliases" not in spec
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "GdpvalPool"
    assert pod["metadata"]["labels"][n.L_CLAIMED] == "" and pod["metadata"]["labels"][n.L_COMPONENT] == n.COMPONENT_POOLED
    assert n.token_secret_name("warm") != ctx.token_secret, "a pool and a run of one name never share a token Secret"


def test_the_claim_takes_a_free_pod_once_and_makes_it_the_runs_sample_pod():
    ctx = run_ctx(agent={"sampleDeadlineSeconds": 900}, pod={"labels": {"team": "a", "kueue.x-k8s.io/queue-name": "q"}})
    lock = pool.lock_patch(view("p1"), ctx.owner_reference())
    assert lock == [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "pool-uid"},
        {"op": "replace", "path": "/metadata/ownerReferences", "value": [ctx.owner_reference()]},
    ], "taken only from its pool; a second claimer's test fails on the run's uid"
    assert not any("/labels/" in op["path"] or "/annotations/" in op["path"] or "/spec/" in op["path"] for op in lock), "the kubelet does not sync on it"
    claim = pool.claim_of(ctx, "id1", "task-1-r0", 2, False, {})
    ops = pool.claim_patch(ctx, claim, 42.5)
    assert ops[:2] == [
        {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": "run-uid"},
        {"op": "test", "path": "/metadata/labels/gdpval.io~1claimed", "value": ""},
    ], "only a pod this run holds and nobody claimed"
    labels = {op["path"].rsplit("/", 1)[1].replace("~1", "/"): op["value"] for op in ops if "/labels/" in op["path"] and op["op"] == "add"}
    assert labels[n.L_RUN_UID] == "run-uid" and labels[n.L_COMPONENT] == n.COMPONENT_SAMPLE and labels[n.L_ATTEMPT] == "2"
    assert labels[n.L_CLAIMED] == "run-uid" and labels["team"] == "a"
    assert "kueue.x-k8s.io/queue-name" not in labels, "Kueue's labels stay those the pod was admitted under"
    assert not any(op["path"] == "/metadata/ownerReferences" for op in ops), "the owner moved with the lock"
    deadline = next(op for op in ops if op["path"] == "/spec/activeDeadlineSeconds")["value"]
    assert deadline == 43 + manifests.pod_deadline(ctx.spec), "the deadline counts from the pod's start, as a go's does"
    wired = contract.Claim.parse(next(op for op in ops if op["path"].endswith("gdpval.io~1claim"))["value"])
    assert wired == claim and wired.run == ctx.storage_name and wired.endpoint == "http://10.0.0.2:9000"
    ahead = pool.claim_patch(ctx, pool.claim_of(ctx, "id2", "t", 1, True, {}), 1)
    assert not any(op["path"] == "/spec/activeDeadlineSeconds" for op in ahead), "a claim ahead of its turn gets its deadline with its go"


def test_a_pod_is_held_while_a_run_owns_it_unclaimed():
    pod = pool.pooled_pod(pool_ctx(), "s", "abcd1234") | {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    pod["metadata"]["uid"] = "pod-uid"
    seen = pool.parse_pooled(pod)
    assert seen.owner == "pool-uid" and not seen.held and seen.free
    pod["metadata"]["ownerReferences"] = [run_ctx().owner_reference()]
    held = pool.parse_pooled(pod)
    assert held.held and not held.free and held.owner == "run-uid"
    pod["metadata"]["labels"][n.L_CLAIMED] = "run-uid"
    claimed = pool.parse_pooled(pod)
    assert claimed.claimed and not claimed.held and not claimed.free


def test_the_claim_secret_is_owned_by_the_pod_and_names_the_claim():
    secret = pool.claim_secret(run_ctx(), view("p1"), "id1", {contract.API_KEY_ENV: "sk"})
    assert secret["metadata"]["name"] == "p1-claim"
    assert secret["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": "uid-p1"}]
    assert secret["stringData"] == {contract.API_KEY_ENV: "sk", contract.CLAIM_ID_KEY: "id1"}


def test_candidates_are_free_pods_of_the_shape_oldest_first_not_taken():
    pods = [view("b", created=2), view("a", created=1), view("c", shape="other"), view("d", ready=False), view("e", claimed="x"), view("f", deleting=True)]
    assert [p.name for p in pool.candidates(pods, "s", set())] == ["a", "b"]
    assert [p.name for p in pool.candidates(pods, "s", {"a"})] == ["b"]


def test_the_pool_keeps_its_size_replaces_old_shapes_and_clears_half_claims():
    spec = GdpvalPoolSpec(size=3)
    pods = [
        view("ready"),
        view("starting", ready=False),
        view("old", shape="old"),
        view("ended", phase="Failed"),
        view("claimed", claimed="run"),
        view("half", held=True),
        view("stale-half", held=True),
        view("new-half", held=True),
    ]
    now = 100.0 + pool.HALF_CLAIM_SECONDS - 1
    plan = pool.decide_pool(spec, 4, "s", pods, 0, now, {"half": 100.0, "stale-half": 50.0, "gone": 1.0})
    assert sorted(plan.delete) == ["ended", "old", "stale-half"]
    assert plan.create == 1, "two current pods of three, none being created"
    assert plan.status.model_dump() == {"observed_generation": 4, "shape": "s", "size": 3, "ready": 1, "starting": 1, "claimed": 1, "message": ""}
    assert plan.wake_at == [100.0 + pool.HALF_CLAIM_SECONDS, now + pool.HALF_CLAIM_SECONDS], "each half claim looked at when it goes stale"
    assert plan.held_since == {"half": 100.0, "stale-half": 50.0, "new-half": now}, "timed from first seen; pods no longer held forgotten"
    assert pool.decide_pool(spec, 4, "s", pods, 1, 0, {}).create == 0, "pods asked for and not seen yet count"
    shrunk = pool.decide_pool(GdpvalPoolSpec(size=1), 5, "s", [view("r1", created=1), view("r2", created=2), view("s1", ready=False)], 0, 0, {})
    assert shrunk.delete == ["s1", "r1"] and shrunk.create == 0, "a smaller pool drops the pods not ready first, then the newest ready"


def test_a_paced_pool_starts_at_most_max_starting_pods_at_once():
    spec = GdpvalPoolSpec(size=10, max_starting=3)
    starting = [view("r1"), view("s1", ready=False)]
    plan = pool.decide_pool(spec, 1, "s", starting, 1, 0, {})
    assert plan.create == 1 and plan.wake_at == [], "one not ready and one being created of three: a pod's readiness wakes the next pass"
    assert pool.decide_pool(spec, 1, "s", [*starting, view("s2", ready=False)], 1, 0, {}).create == 0
    assert pool.decide_pool(GdpvalPoolSpec(size=10), 1, "s", starting, 1, 0, {}).create == 7, "no bound by default"
    assert pool.decide_pool(GdpvalPoolSpec(size=50), 1, "s", [], 0, 0, {}).wake_at == [0], "over a pass's bound: the rest at once"


def test_the_claimer_offers_a_pod_once_and_forgets_it_when_the_watch_does():
    shown = {"ns": [view("a", created=1), view("b", created=2)], "other": [view("a", created=1)]}
    claimer = Claimer(kube=None, pool_pods=lambda namespace: shown[namespace])  # type: ignore[arg-type]
    assert [claimer._next("ns", "s").name, claimer._next("ns", "s").name, claimer._next("ns", "s")] == ["a", "b", None]
    assert claimer._next("other", "s").name == "a", "a name taken in one namespace is free in another"
    shown["ns"] = [view("c", created=3)]
    assert claimer._next("ns", "s").name == "c" and claimer.taken["ns"] == {"c"}, "pods gone from the watch are forgotten"

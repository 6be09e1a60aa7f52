"""NetworkPolicy on the local cluster: kube-router enforces it, and a sample pod of a GdpvalRun with
the network off reaches the model and S3 and nothing else.

Each probe is a TCP connect from inside a pod (`kubectl exec`): `open`, `refused` (kube-router
REJECTs what a policy denies) or `blocked` (no answer: the host drops anything bound off the
machine). Every target that a policy must refuse is a real listener that a pod without a policy
reaches, so a refusal can only come from the policy.
"""

from __future__ import annotations

import time

import pytest

from support.netprobe import BYSTANDER_PORT, ENFORCE_TIMEOUT, METADATA, addr, endpoint, model_control, probe
from support.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def test_policy_closes_and_reopens_egress(env, bystander, node_listener):
    """The engine itself: a deny-all egress policy on the bystander closes the node listener to it
    within seconds; deleting the policy opens it again."""
    name, _ = bystander
    assert probe(env.kube, name, "main", node_listener) == {addr(node_listener): "open"}
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "bystander-no-egress"},
        "spec": {"podSelector": {"matchLabels": {"app": "bystander"}}, "policyTypes": ["Egress"], "egress": []},
    }
    started = time.monotonic()
    env.kube.apply(policy)
    try:
        wait_until(lambda: probe(env.kube, name, "main", node_listener) == {addr(node_listener): "refused"}, ENFORCE_TIMEOUT, "the policy to be enforced")
        print(f"deny-all egress enforced {time.monotonic() - started:.1f}s after apply")
    finally:
        env.kube.run("delete", "networkpolicy", "bystander-no-egress", "--wait=true")
    wait_until(lambda: probe(env.kube, name, "main", node_listener) == {addr(node_listener): "open"}, ENFORCE_TIMEOUT, "the policy to be lifted")


def test_network_off_sample_reaches_model_and_s3_only(env, bystander, node_listener):
    """A network-off run's sample pod, caught while its agent waits on its second model reply:
    from inside it the model and S3 are open; another node port, another pod and the metadata
    address are not. The bystander, without a policy, reaches the same listeners."""
    model, s3 = endpoint(env.model_url), endpoint(env.endpoint)
    bystander_name, bystander_ip = bystander
    others = [node_listener, (bystander_ip, BYSTANDER_PORT)]
    assert probe(env.kube, bystander_name, "main", model, s3, *others) == {addr(t): "open" for t in (model, s3, *others)}

    model_control(env.model_url, "hold", {"after": 1})
    try:
        name = env.submit("network-off", selection={"limit": 1}, sandbox={"network": False})
        wait_until(lambda: model_control(env.model_url, "stats")["held"] >= 1, 300, "the sample's second model call")
        (pod,) = wait_until(lambda: env.pods_in(name, "Running"), 60, "the sample pod reported Running (its agent can call the model first)")
        got = probe(env.kube, pod["metadata"]["name"], "sandbox", model, s3, *others, METADATA)
    finally:
        model_control(env.model_url, "release", {})
    assert got == {
        addr(model): "open",
        addr(s3): "open",
        addr(node_listener): "refused",
        addr(others[1]): "refused",
        addr(METADATA): "blocked",
    }
    env.wait_condition(name, "Succeeded")

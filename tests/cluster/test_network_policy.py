"""NetworkPolicy on the local cluster: kube-router enforces it, and a sample pod of a GdpvalRun with
the network off reaches the model and S3 and nothing else.

Each probe is a TCP connect from inside a pod (`kubectl exec`): `open`, `refused` (kube-router
REJECTs what a policy denies) or `blocked` (no answer: the host drops anything bound off the
machine). Every target that a policy must refuse is a real listener that a pod without a policy
reaches, so a refusal can only come from the policy.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from operator_support import Kube
from test_operator import Env, env  # noqa: F401  (the operator, MinIO, the scripted model and a restricted namespace)

from support.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BYSTANDER_PORT = 8080
METADATA = ("169.254.169.254", 80)
PROBE_TIMEOUT = 3.0
ENFORCE_TIMEOUT = 60

# Prints one JSON object: "host:port" -> open | refused | blocked.
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=float(sys.argv[1])).close()
        out[target] = "open"
    except ConnectionRefusedError:
        out[target] = "refused"
    except OSError:
        out[target] = "blocked"
print(json.dumps(out))
"""

# A listener that never answers: the TCP handshake is all a probe needs.
LISTEN = f"import socket, time; s = socket.create_server(('0.0.0.0', {BYSTANDER_PORT})); time.sleep(10**9)"

RESTRICTED_CONTAINER = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


def addr(target: tuple[str, int]) -> str:
    return f"{target[0]}:{target[1]}"


def probe(kube: Kube, pod: str, container: str, *targets: tuple[str, int]) -> dict[str, str]:
    """What a TCP connect from inside `pod` gets for each target."""
    done = kube.run("exec", pod, "-c", container, "--", "python3", "-c", PROBE, str(PROBE_TIMEOUT), *map(addr, targets), timeout=60)
    return json.loads(done.stdout)


def model_control(model_url: str, action: str, body: dict | None = None) -> dict:
    """The scripted model's /fake/ control endpoint (hold, release, stats)."""
    parts = urlsplit(model_url)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/fake/{action}", data=data, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=10) as reply:
        return json.loads(reply.read() or b"{}")


def endpoint(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    return parts.hostname, parts.port


@pytest.fixture(scope="module")
def node_listener(env: Env) -> Iterator[tuple[str, int]]:  # noqa: F811
    """Another server on the node address, the one the model and S3 use, on another port."""
    with socket.create_server((env.node_ip, 0)) as server:
        yield env.node_ip, server.getsockname()[1]


@pytest.fixture(scope="module")
def bystander(env: Env) -> tuple[str, str]:  # noqa: F811
    """A pod without any policy, listening on BYSTANDER_PORT: (name, pod IP)."""
    name = "bystander"
    container = {"name": "main", "image": env.images[1], "imagePullPolicy": "Never", "command": ["python3", "-c", LISTEN], **RESTRICTED_CONTAINER}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bystander"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    env.kube.apply(pod)
    env.kube.run("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150)
    ip = env.kube.get("pod", name)["status"]["podIP"]
    with socket.create_connection((ip, BYSTANDER_PORT), timeout=10):
        pass  # listening, and reachable from the node
    return name, ip


def test_policy_closes_and_reopens_egress(env, bystander, node_listener):  # noqa: F811
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


def test_network_off_sample_reaches_model_and_s3_only(env, bystander, node_listener):  # noqa: F811
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
        (pod,) = env.pods_in(name, "Running")
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

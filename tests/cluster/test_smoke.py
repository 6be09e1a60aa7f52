"""Smoke tests of the local cluster: real API server, kubelet, containerd, pods, MinIO."""

from __future__ import annotations

import json
import secrets
import time

import pytest

pytestmark = [pytest.mark.cluster]

# What the `restricted` Pod Security Standard requires of every container.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(name: str, image: str, command: list[str], **extra) -> dict:
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "command": command, "securityContext": RESTRICTED}],
    }
    metadata = {"name": name, **extra.pop("metadata", {})}
    spec["containers"][0].update(extra.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {**spec, **extra}}


def wait_phase(cluster, ns: str, name: str, phases=("Succeeded",), timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        phase = cluster.kubectl("-n", ns, "get", "pod", name, "-o", "jsonpath={.status.phase}").stdout
        if phase in phases:
            return phase
        if phase == "Failed":
            break
        time.sleep(1)
    describe = cluster.kubectl("-n", ns, "describe", "pod", name, check=False).stdout
    logs = cluster.kubectl("-n", ns, "logs", name, check=False)
    raise AssertionError(f"pod {name} is {phase!r}, wanted {phases}\n{describe}\n{logs.stdout}{logs.stderr}")


@pytest.fixture(scope="module")
def ns(cluster):
    name = f"smoke-{secrets.token_hex(4)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_node_ready(cluster):
    node = cluster.kubectl_json("get", "node", cluster.node_name)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert {"type": "InternalIP", "address": cluster.node_ip} in node["status"]["addresses"]


def test_pod_from_local_image_writes_to_minio(cluster, cluster_s3, ns):
    bucket = cluster_s3.make_bucket()
    script = "import boto3, os\nboto3.client('s3').put_object(Bucket=os.environ['BUCKET'], Key='smoke/hello.txt', Body=b'written from a pod')\n"
    env = [{"name": k, "value": v} for k, v in {**cluster_s3.env(), "BUCKET": bucket}.items()]
    cluster.apply(pod("writer", cluster.images["operator"], ["python3", "-c", script], metadata={"namespace": ns}, container={"env": env}))
    wait_phase(cluster, ns, "writer")
    body = cluster_s3.client().get_object(Bucket=bucket, Key="smoke/hello.txt")["Body"].read()
    assert body == b"written from a pod"


def test_job_runs_to_completion(cluster, ns):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "counter", "namespace": ns},
        "spec": {
            "backoffLimit": 0,
            "completions": 2,
            "parallelism": 2,
            "template": {"spec": pod("x", cluster.images["sandbox-slim"], ["sh", "-c", "seq 3"])["spec"]},
        },
    }
    cluster.apply(job)
    cluster.kubectl("-n", ns, "wait", "--for=condition=Complete", "job/counter", "--timeout=180s", timeout=200)
    assert cluster.kubectl_json("-n", ns, "get", "job", "counter")["status"]["succeeded"] == 2


def test_owner_reference_garbage_collection(cluster, ns):
    cluster.kubectl("-n", ns, "create", "configmap", "owner")
    uid = cluster.kubectl("-n", ns, "get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}").stdout
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
    cluster.apply(pod("owned", cluster.images["sandbox-slim"], ["sleep", "600"], metadata={"namespace": ns, "ownerReferences": [owner]}))
    wait_phase(cluster, ns, "owned", phases=("Running",))
    cluster.kubectl("-n", ns, "delete", "configmap", "owner")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if cluster.kubectl("-n", ns, "get", "pod", "owned", check=False).returncode != 0:
            return
        time.sleep(1)
    pytest.fail("pod owned by a deleted ConfigMap was not garbage-collected")


def test_kubectl_logs(cluster, ns):
    marker = f"marker-{secrets.token_hex(6)}"
    cluster.apply(pod("talker", cluster.images["sandbox-slim"], ["sh", "-c", f"echo {marker}; echo done >&2"], metadata={"namespace": ns}))
    wait_phase(cluster, ns, "talker")
    # stdout and stderr are separate streams in the CRI log: their relative order is not kept.
    assert sorted(cluster.kubectl("-n", ns, "logs", "talker").stdout.split()) == sorted([marker, "done"])


def test_restricted_namespace_rejects_privileged_pod(cluster):
    name = f"restricted-{secrets.token_hex(4)}"
    cluster.kubectl("create", "namespace", name)
    try:
        cluster.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
        privileged = pod(
            "privileged", cluster.images["sandbox-slim"], ["true"], metadata={"namespace": name}, container={"securityContext": {"privileged": True}}
        )
        refused = cluster.apply(privileged, check=False)
        assert refused.returncode != 0
        assert "violates PodSecurity" in refused.stderr and "restricted" in refused.stderr
        compliant = pod("compliant", cluster.images["sandbox-slim"], ["true"], metadata={"namespace": name})
        cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(compliant))
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_pods_reach_the_node_and_api_but_nothing_off_machine(cluster, ns):
    """Pod traffic stays on the machine: the node address and the `kubernetes` Service work,
    anything else is dropped before it is forwarded."""
    script = (
        "import socket, sys\n"
        "def probe(host, port):\n"
        "    s = socket.socket(); s.settimeout(3)\n"
        "    try:\n"
        "        s.connect((host, port)); return 'open'\n"
        "    except OSError as e:\n"
        "        return type(e).__name__\n"
        "    finally:\n"
        "        s.close()\n"
        f"print(probe('{cluster.node_ip}', 6443), probe('10.96.0.1', 443), probe('192.0.2.1', 80))\n"
    )
    cluster.apply(pod("prober", cluster.images["sandbox-slim"], ["python3", "-c", script], metadata={"namespace": ns}))
    wait_phase(cluster, ns, "prober")
    node, service, outside = cluster.kubectl("-n", ns, "logs", "prober").stdout.split()
    assert (node, service) == ("open", "open")
    assert outside != "open"

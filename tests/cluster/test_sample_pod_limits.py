"""A sample pod on the local cluster runs with its run's sandbox settings as limits, read back from
the API and from the sandbox container's own cgroup, and with its tool-server token from a Secret;
with the network on it reaches anything but the link-local metadata addresses.

The sample is caught while its agent waits on its second model reply (the scripted model holds it),
so the pod is certainly running; released, the run must still succeed: the agent and the sandbox
agreed on the token they each read from the Secret.
"""

from __future__ import annotations

import base64
import json
import time

import pytest

from gdpval import contract
from gdpval.controller.pure import names as n
from support.netprobe import BYSTANDER_PORT, METADATA, addr, endpoint, model_control, probe
from support.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MIB = 1024 * 1024
SANDBOX = {"memoryMiB": 640, "diskMiB": 300, "cpus": 0.5}
VOLUMES = {"references": "96Mi", "scratch": "128Mi"}

# Run inside the sandbox container: its cgroup limits (v1 or v2), its /tmp mount and its token file.
READ_BACK = f"""
import json, os
def read(*paths):
    for path in paths:
        if os.path.exists(path):
            return open(path).read().split()
    return None
mounts = [line.split() for line in open("/proc/self/mounts")]
tmp = next((m for m in mounts if m[1] == "/tmp"), None)
shm = next((m for m in mounts if m[1] == "/dev/shm"), None)
print(json.dumps({{
    "memory": read("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "cpu_v2": read("/sys/fs/cgroup/cpu.max"),
    "cpu_v1": (read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")),
    "tmp": tmp and [tmp[2], tmp[3]],
    "shm": shm and [shm[2], shm[3]],
    "token": open("{contract.TOKEN_FILE}").read(),
    "token_in_env": "{contract.TOKEN_ENV}" in os.environ,
}}))
"""


def cpu_quota(seen: dict) -> float:
    """Cores allowed by the container's CFS quota, from cgroup v2's cpu.max or v1's quota and period."""
    quota, period = seen["cpu_v2"] or [seen["cpu_v1"][0][0], seen["cpu_v1"][1][0]]
    return int(quota) / int(period)


def test_sample_pod_runs_with_the_sandbox_limits_and_its_token_from_a_secret(env):
    model_control(env.model_url, "hold", {"after": 1})
    try:
        name = env.submit("limits", selection={"limit": 1}, sandbox=SANDBOX, pod={"volumes": VOLUMES})
        wait_until(lambda: model_control(env.model_url, "stats")["held"] >= 1, 300, "the sample's second model call")
        (pod,) = wait_until(lambda: env.pods_in(name, "Running"), 60, "the sample pod reported Running (the agent can call the model first)")
        done = env.kube.run("exec", pod["metadata"]["name"], "-c", "sandbox", "--", "python3", "-c", READ_BACK, timeout=60)
        seen = json.loads(done.stdout)
    finally:
        model_control(env.model_url, "release", {})

    containers = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    assert containers["sandbox"]["resources"]["limits"] == {"memory": "640Mi", "cpu": "500m", "ephemeral-storage": "300Mi"}
    assert all({"cpu", "memory", "ephemeral-storage"} <= set(c["resources"]["requests"]) for c in containers.values())
    sizes = {v["name"]: v["emptyDir"].get("sizeLimit") for v in pod["spec"]["volumes"] if "emptyDir" in v}
    assert sizes == {"workspace": "300Mi", "sandbox-tmp": "320Mi", "sandbox-shm": "160Mi", **VOLUMES}, "the API server kept every size as sent"

    assert int(seen["memory"][0]) == 640 * MIB, seen
    assert cpu_quota(seen) == 0.5, seen
    assert seen["tmp"][0] == "tmpfs" and f"size={320 * MIB // 1024}k" in seen["tmp"][1], seen["tmp"]
    assert seen["shm"][0] == "tmpfs" and f"size={160 * MIB // 1024}k" in seen["shm"][1], seen["shm"]

    secret = env.kube.get("secret", n.token_secret_name(name))
    token = base64.b64decode(secret["data"][contract.TOKEN_KEY]).decode()
    run_uid = env.kube.get("gdpvalrun", name)["metadata"]["uid"]
    assert [o["uid"] for o in secret["metadata"]["ownerReferences"]] == [run_uid], "the Secret goes with its run"
    assert seen["token"] == token and len(token) >= 32 and not seen["token_in_env"]
    assert token not in json.dumps(pod), "the token never appears in the pod's spec"
    env.wait_condition(name, "Succeeded")
    assert env.kube.run_status(name)["samples"]["succeeded"] == 1, "the agent reached its tool server with the token from the Secret"


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({"volumes": {"scratch": "two gigs"}}, "must be a quantity"),
        ({"resources": {"sandbox": {"limits": {"memory": "4 GB"}}}}, "values must be quantities"),
    ],
)
def test_the_api_server_refuses_sizes_that_are_not_quantities(env, pod, message):
    done = env.kube.run("apply", "--dry-run=server", "-f", "-", input=json.dumps(env.manifest("bad-size", pod=pod)), check=False)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_network_on_sample_reaches_everything_but_the_metadata_address(env, bystander, node_listener):
    """A network-on sample is selected by its run's egress policy (kube-router then refuses whatever
    the policy does not allow) and still reaches what a network-off sample may not: another node
    port and another pod. The metadata address is not open; this cluster's host drops anything
    bound off the machine before a policy is consulted, so its refusal by the policy's `except` is
    checked in the unit tests, not here."""
    model, s3 = endpoint(env.model_url), endpoint(env.endpoint)
    others = [node_listener, (bystander[1], BYSTANDER_PORT)]
    model_control(env.model_url, "hold", {"after": 1})
    try:
        name = env.submit("network-on", selection={"limit": 1}, sandbox={"network": True})
        wait_until(lambda: model_control(env.model_url, "stats")["held"] >= 1, 300, "the sample's second model call")
        (pod,) = wait_until(lambda: env.pods_in(name, "Running"), 60, "the sample pod reported Running (the agent can call the model first)")
        policy = env.kube.get("networkpolicy", n.network_policy_name(name, network=True))
        got = probe(env.kube, pod["metadata"]["name"], "sandbox", model, s3, *others, METADATA)
    finally:
        model_control(env.model_url, "release", {})
    assert policy["spec"]["podSelector"]["matchLabels"] == {n.L_RUN_UID: pod["metadata"]["labels"][n.L_RUN_UID], n.L_COMPONENT: n.COMPONENT_SAMPLE}
    assert got == {addr(t): "open" for t in (model, s3, *others)} | {addr(METADATA): "blocked"}
    env.wait_condition(name, "Succeeded")


def test_a_sample_writing_past_its_disk_is_evicted_by_the_kubelet(env):
    """The model fills /workspace past spec.sandbox.diskMiB: the kubelet's eviction manager measures
    the emptyDir against its sizeLimit and evicts the pod, naming the volume."""
    fill = {"bash": "head -c 200M /dev/zero > /workspace/fill; sleep 170"}
    name = env.submit("disk", selection={"limit": 1}, sandbox={"diskMiB": 64}, model={"extraBody": {"fake_script": [fill]}})
    started = time.monotonic()

    def eviction() -> dict | None:
        """The kubelet's Event on the pod: it outlives the pod, which the operator replaces at once."""
        listed = env.kube.get("events") or {}
        return next((e for e in listed.get("items", []) if e.get("reason") == "Evicted" and e["involvedObject"]["name"].startswith(name)), None)

    event = wait_until(eviction, 240, "the kubelet to evict the sample pod")
    print(f"evicted {time.monotonic() - started:.0f}s after the run was created: {event['message']}")
    assert "workspace" in event["message"] and "64Mi" in event["message"], event
    env.kube.run("delete", "gdpvalrun", name, "--wait=false")

"""`hack/cluster.sh down` leaves nothing behind, and a warm `up` brings the cluster back in time.

Runs after every other test (marker cluster_teardown) and only once no other session holds the
cluster (the shared lock the `cluster` fixture takes); it leaves the cluster up again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from infra import cluster as local_cluster
from infra import hoststate

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_teardown, pytest.mark.slow]

WARM_UP_LIMIT = 60.0


def leftovers(env: dict[str, str], baseline: hoststate.Baseline) -> dict[str, list[str]]:
    found = {
        "processes": hoststate.own_processes(env["OWN_BINARIES"].split()),
        "mounts": hoststate.mounts(env["WORKDIR"]),
        "interfaces": hoststate.interfaces([env["BRIDGE"], env["NODE_IF"]], env["BRIDGE"]),
        "iptables": hoststate.iptables_leftovers(baseline, env["RULE_TAG"]),
        "sysctls": hoststate.sysctl_changes(baseline),
        "cgroups": hoststate.pod_cgroups(),
        "paths": hoststate.new_paths(baseline, env["HOST_PATHS"].split()),
    }
    return {k: v for k, v in found.items() if v}


def test_down_restores_the_machine_and_warm_up_is_fast(cluster, cluster_users):
    cluster_users.release()
    if not cluster_users.acquire_exclusive(timeout=1800):
        pytest.skip("another session kept using the cluster for 30 minutes")
    env = local_cluster.cluster_env()
    busy = f"busy-{int(time.time())}"
    try:
        # A pod running during `down` exercises container, netns, veth and cgroup cleanup.
        cluster.kubectl(
            "-n",
            "default",
            "run",
            busy,
            "--restart=Never",
            f"--image={cluster.images['sandbox-slim']}",
            "--image-pull-policy=Never",
            "--command",
            "--",
            "sleep",
            "600",
        )
        cluster.kubectl("-n", "default", "wait", "--for=condition=Ready", "pod", busy, "--timeout=120s", timeout=150)
        baseline = hoststate.Baseline.read(Path(env["STATE"]))
        local_cluster.tear_down()
        assert leftovers(env, baseline) == {}
    finally:
        started = time.monotonic()
        local_cluster.bring_up(images=False)
        warm = time.monotonic() - started
        cluster_users.release()
        cluster_users.acquire_shared()
    back = local_cluster.current()
    node = back.kubectl_json("get", "node", back.node_name)
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    # The restored cluster runs pods again (sandbox, network, the imported images).
    after = f"after-{busy}"
    back.kubectl(
        "-n", "default", "run", after, "--restart=Never", f"--image={back.images['sandbox-slim']}", "--image-pull-policy=Never", "--command", "--", "true"
    )
    deadline = time.monotonic() + 120
    while back.kubectl("-n", "default", "get", "pod", after, "-o", "jsonpath={.status.phase}").stdout != "Succeeded":
        assert time.monotonic() < deadline, back.kubectl("-n", "default", "describe", "pod", after).stdout
        time.sleep(0.5)
    first_pod = time.monotonic() - started
    print(f"warm bring-up: {warm:.1f}s to node Ready, {first_pod:.1f}s to a first pod Succeeded")
    back.kubectl("-n", "default", "delete", "pod", busy, after, "--wait=false")
    assert warm <= WARM_UP_LIMIT

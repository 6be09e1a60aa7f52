"""The chart's opt-in image pre-pull DaemonSet: what it pulls, where, and with how little."""

from __future__ import annotations

import pytest

from support.chart import CHART, RELEASE, VARIANTS, helm, of_kind, one, operator_container, render, set_args


def _daemonset(values: dict) -> tuple[dict, dict]:
    """The pre-pull DaemonSet's pod spec, and the operator's environment (the images sample pods use)."""
    docs = render(values)
    env = {e["name"]: e.get("value") for e in operator_container(docs)["env"]}
    return one(docs, "DaemonSet", f"{RELEASE}-gdpval-prepull")["spec"]["template"]["spec"], env


def test_off_by_default() -> None:
    assert not of_kind(render(), "DaemonSet")


def test_pulls_the_sample_pods_images_with_a_no_op() -> None:
    pod, env = _daemonset({"prepull": {"enabled": True}})
    images = [c["image"] for c in pod["initContainers"]]
    assert images == [env["GDPVAL_SANDBOX_IMAGE"], env["GDPVAL_AGENT_IMAGE"]]
    assert all(c["command"] == ["true"] for c in pod["initContainers"])
    [hold] = pod["containers"]
    assert hold["image"] == env["GDPVAL_AGENT_IMAGE"], "the holding container pulls nothing more"


def test_extra_images_digests_and_custom_no_op() -> None:
    digest = "sha256:" + "b" * 64
    values = {
        "image": {"digest": digest},
        "prepull": {"enabled": True, "extraImages": ["registry.example/s:1", f"localhost/gdpval-operator@{digest}"], "command": ["python3", "-c", "pass"]},
    }
    pod, env = _daemonset(values)
    images = [c["image"] for c in pod["initContainers"]]
    assert images == [env["GDPVAL_SANDBOX_IMAGE"], f"localhost/gdpval-operator@{digest}", "registry.example/s:1"]
    assert len({c["name"] for c in pod["initContainers"]}) == len(images)
    assert all(c["command"] == ["python3", "-c", "pass"] for c in pod["initContainers"])


def test_covers_the_nodes_a_run_may_use() -> None:
    pod, _ = _daemonset(VARIANTS["prepull"])
    assert pod["nodeSelector"] == {"gdpval.io/samples": "true"}
    assert pod["tolerations"] == [{"key": "gdpval", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["initContainers"][-1]["image"] == "registry.example/sandbox:custom"


def test_holds_no_token_and_asks_for_almost_nothing() -> None:
    pod, _ = _daemonset({"prepull": {"enabled": True}})
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    for c in pod["initContainers"] + pod["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert c["resources"]["requests"] == {"cpu": "1m", "memory": "8Mi"}
        assert c["resources"]["limits"]["memory"] == "32Mi"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"prepull": {"enabled": True, "command": []}}, "command"),
        ({"prepull": {"images": ["x"]}}, "images"),
        ({"prepull": {"extraImages": [""]}}, "extraImages"),
    ],
)
def test_values_schema_refuses(values: dict, message: str) -> None:
    proc = helm("template", RELEASE, str(CHART), *set_args(values), check=False)
    assert proc.returncode != 0 and message in proc.stderr

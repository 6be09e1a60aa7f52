"""Manifests: restricted pods, secrets only where needed, owner references, names within 63 chars."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gdpval import contract
from gdpval.controller import manifests as m
from gdpval.controller import names as n
from gdpval.controller.api import GdpvalRunSpec
from gdpval.settings import RunSettings

LONG_RUN = "a-very-long-gdpval-run-name-that-goes-on-and-on-for-sixty-chars"


def ctx(name="demo", **spec) -> m.RunContext:
    base = {
        "model": {"name": "gpt-x", "baseURL": "http://10.250.0.1:8000/v1", "apiKeySecretRef": {"name": "openai", "key": "api-key"}},
        "output": {"url": "s3://bucket/pre", "endpoint": "http://10.250.0.1:9000", "credentialsSecret": {"name": "s3creds"}},
    }
    base.update(spec)
    return m.RunContext(name, "ns", "uid-1", GdpvalRunSpec.model_validate(base), "agent:1", "sandbox:1")


def containers(pod):
    return {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def env_names(container):
    return {e["name"] for e in container.get("env", [])}


def secret_refs(container):
    return {e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env", []) if "valueFrom" in e}


def test_sample_pod_is_restricted_and_owned():
    pod = m.sample_pod(ctx(), "task-1-r0", 2, "tok")
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in containers(pod).values():
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsUser"] == 1000
    assert {n: c["securityContext"]["readOnlyRootFilesystem"] for n, c in containers(pod).items()} == {"stage": True, "sandbox": False, "agent": True}
    owner = pod["metadata"]["ownerReferences"][0]
    assert owner["controller"] and owner["uid"] == "uid-1" and owner["kind"] == "GdpvalRun"
    assert spec["activeDeadlineSeconds"] == 7200 + m.POD_DEADLINE_MARGIN


def test_secrets_reach_only_the_containers_that_need_them():
    c = containers(m.sample_pod(ctx(), "task-1-r0", 1, "tok"))
    assert secret_refs(c["sandbox"]) == set() and env_names(c["sandbox"]) == {contract.TOKEN_ENV}
    assert secret_refs(c["agent"]) == {"openai", "s3creds"} and "OPENAI_API_KEY" in env_names(c["agent"])
    assert "OPENAI_API_KEY" not in env_names(c["stage"]) and secret_refs(c["stage"]) == {"s3creds"}


def test_pod_layout_matches_the_contract():
    pod = m.sample_pod(ctx(), "task-1-r0", 3, "tok")
    c = containers(pod)
    assert [x["name"] for x in pod["spec"]["initContainers"]] == ["stage", "sandbox"]
    assert c["sandbox"]["restartPolicy"] == "Always" and "exec" in c["sandbox"]["startupProbe"]
    assert c["sandbox"]["command"][:2] == ["python3", "/opt/gdpval/toolserver.py"] and "127.0.0.1:7000" in c["sandbox"]["command"]
    assert c["agent"]["command"][:2] == ["gdpval", "sample"] and c["agent"]["command"][-6:] == [
        "--sample",
        "task-1-r0",
        "--attempt",
        "3",
        "--sandbox",
        contract.SANDBOX_URL,
    ]
    mounts = {(x["name"], x.get("readOnly", False)) for x in c["sandbox"]["volumeMounts"]}
    assert mounts == {("workspace", False), ("references", True)}
    assert ("references", True) in {(x["name"], x.get("readOnly", False)) for x in c["agent"]["volumeMounts"]}
    assert c["stage"]["command"][:2] == ["gdpval", "stage"] and "--dest" in c["stage"]["command"]


def test_names_and_labels_fit_63_characters():
    long_sample = "x" * 51
    pod = m.sample_pod(ctx(LONG_RUN), long_sample, 12, "tok")
    assert len(pod["metadata"]["name"]) <= 63
    assert all(len(v) <= 63 for v in pod["metadata"]["labels"].values())
    assert pod["metadata"]["annotations"][n.A_SAMPLE_ID] == long_sample
    assert n.sample_pod_name(LONG_RUN, long_sample, 1) != n.sample_pod_name(LONG_RUN, long_sample + "y", 1)
    assert n.sample_pod_name("demo", "t-r0", 1) == "demo-t-r0-a1"
    assert len(m.prepare_job(ctx(LONG_RUN))["metadata"]["name"]) <= 63
    assert n.label_value("ok-value") == "ok-value" and len(n.label_value("bad value!" * 10)) <= 63


def test_overrides_apply():
    c = ctx(
        pod={
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
            "annotations": {"a": "b"},
            "nodeSelector": {"pool": "eval"},
            "tolerations": [{"key": "eval", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "priorityClassName": "low",
            "runtimeClassName": "gvisor",
            "serviceAccountName": "runner",
            "resources": {"agent": {"limits": {"memory": "1Gi", "cpu": 1}}, "jobs": {"requests": {"cpu": "100m"}}},
        }
    )
    pod = m.sample_pod(c, "s-r0", 1, "tok")
    spec = pod["spec"]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q" and pod["metadata"]["annotations"]["a"] == "b"
    assert spec["nodeSelector"] == {"pool": "eval"} and spec["runtimeClassName"] == "gvisor" and spec["priorityClassName"] == "low"
    assert spec["serviceAccountName"] == "runner" and spec["automountServiceAccountToken"] is False
    assert containers(pod)["agent"]["resources"] == {"limits": {"memory": "1Gi", "cpu": "1"}}
    job = m.prepare_job(c)
    job_spec = job["spec"]["template"]["spec"]
    assert "runtimeClassName" not in job_spec and job_spec["tolerations"] == [{"key": "eval", "operator": "Exists"}]
    assert job_spec["containers"][0]["resources"] == {"requests": {"cpu": "100m"}}
    assert job["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_our_labels_win_over_user_labels():
    pod = m.sample_pod(ctx(pod={"labels": {n.L_RUN_UID: "forged"}}), "s-r0", 1, "tok")
    assert pod["metadata"]["labels"][n.L_RUN_UID] == "uid-1"


def test_prepare_job_receives_the_run_settings_as_json():
    c = ctx(
        dataset={"id": "s3://data/gdpval", "revision": "abc"},
        selection={"limit": 3, "taskIds": ["t1", "t2"], "sectors": ["Retail Trade"], "repeats": 2},
        agent={"maxSteps": 10, "commandTimeoutSeconds": 20, "sampleDeadlineSeconds": 600},
        sandbox={"network": True, "allowedEgress": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}]},
        parallelism=7,
    )
    job = m.prepare_job(c)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gdpval", "prepare", "--run-name", "ns.demo-uid1", "--owner", "ns/demo/uid-1", "--cache-dir", contract.CACHE_DIR]
    rule = job["spec"]["podFailurePolicy"]["rules"][0]
    assert rule == {"action": "FailJob", "onExitCodes": {"containerName": "prepare", "operator": "In", "values": [contract.EXIT_RUN_CONFLICT]}}
    env = {e["name"]: e.get("value") for e in container["env"]}
    sent = json.loads(env[contract.SETTINGS_ENV])
    assert RunSettings.model_validate(sent) == RunSettings.of(c.spec)
    assert sent["selection"]["taskIds"] == ["t1", "t2"] and sent["agent"]["sampleDeadlineSeconds"] == 600 and sent["parallelism"] == 7
    assert "apiKeySecretRef" not in sent["model"] and "credentialsSecret" not in sent["output"] and "allowedEgress" not in sent["sandbox"]
    assert secret_refs(container) == {"s3creds"} and contract.API_KEY_ENV not in env


@pytest.mark.parametrize("agent,pod", [(60, 60 + m.POD_DEADLINE_MARGIN), (7200, 7200 + m.POD_DEADLINE_MARGIN)])
def test_pod_deadline_leaves_room_to_stage_and_upload(agent, pod):
    c = ctx(agent={"sampleDeadlineSeconds": agent})
    assert m.sample_pod(c, "s-r0", 1, "tok")["spec"]["activeDeadlineSeconds"] == pod


def test_assemble_job():
    job = m.assemble_job(ctx())
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gdpval", "submission", "build", "--run-name", "ns.demo-uid1", "--output", "s3://bucket/pre"]
    assert secret_refs(container) == {"s3creds"} and "OPENAI_API_KEY" not in env_names(container)
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_every_step_of_a_run_uses_its_own_folder_and_a_run_started_before_keeps_its_name():
    c = ctx()
    pod = m.sample_pod(c, "s-r0", 1, "tok")["spec"]
    steps = [pod["initContainers"][0]["command"], pod["containers"][0]["command"], m.assemble_job(c)["spec"]["template"]["spec"]["containers"][0]["command"]]
    assert all(cmd[cmd.index("--run-name") + 1] == "ns.demo-uid1" for cmd in steps)
    legacy = dataclasses.replace(c, legacy_storage=True)
    assert legacy.storage_name == "demo" and "demo" in m.sample_pod(legacy, "s-r0", 1, "tok")["spec"]["containers"][0]["command"]


def test_network_policy_allows_only_dns_and_the_two_endpoints():
    policy = m.network_policy(ctx())
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {n.L_RUN_UID: "uid-1", n.L_COMPONENT: "sample"}
    assert spec["ingress"] == [] and set(spec["policyTypes"]) == {"Ingress", "Egress"}
    blocks = [(r["to"][0].get("ipBlock", {}).get("cidr"), r["ports"][0]["port"]) for r in spec["egress"][1:]]
    assert blocks == [("10.250.0.1/32", 8000), ("10.250.0.1/32", 9000)]


def test_network_policy_by_port_for_named_endpoints():
    c = ctx(model={"name": "m"}, sandbox={"allowedEgress": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}]})
    egress = m.network_policy(c)["spec"]["egress"]
    assert egress[1] == {"ports": [{"protocol": "TCP", "port": 443}]}
    assert egress[-1] == {"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}


def test_event_targets_the_run():
    ev = m.event("demo", "ns", "uid-1", "GdpvalRun", "Running", "x" * 2000, "2026-01-01T00:00:00Z", "abc", warning=True)
    assert ev["involvedObject"]["uid"] == "uid-1" and ev["type"] == "Warning" and len(ev["message"]) == 1024
    assert ev["metadata"]["name"] == "demo.abc"

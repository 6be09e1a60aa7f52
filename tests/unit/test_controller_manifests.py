"""Manifests: restricted pods, secrets only where needed, owner references, names within 63 chars."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from pydantic import ValidationError

from gdpval import contract
from gdpval.api.v1alpha1 import POD_DEFAULTS_ENV, QUANTITY_REGEX, PodDefaults
from gdpval.controller.effects.worker import Defaults
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import names as n
from gdpval.controller.pure import network as net
from gdpval.settings import RunSettings
from support.run_context import ctx

LONG_RUN = "a-very-long-gdpval-run-name-that-goes-on-and-on-for-sixty-chars"


def containers(pod):
    return {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}


def env_names(container):
    return {e["name"] for e in container.get("env", [])}


def secret_refs(container):
    return {e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env", []) if "valueFrom" in e}


def test_sample_pod_is_restricted_and_owned():
    pod = m.sample_pod(ctx(), "task-1-r0", 2)
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
    pod = m.sample_pod(ctx(), "task-1-r0", 1)
    c = containers(pod)
    assert "env" not in c["sandbox"], "the sandbox gets no environment from the pod spec, secret or not"
    assert secret_refs(c["agent"]) == {"openai", "s3creds", "demo-sandbox-token"} and "OPENAI_API_KEY" in env_names(c["agent"])
    assert "OPENAI_API_KEY" not in env_names(c["stage"]) and secret_refs(c["stage"]) == {"s3creds"}


def test_pod_layout_matches_the_contract():
    pod = m.sample_pod(ctx(), "task-1-r0", 3)
    c = containers(pod)
    # The sandbox boots beside stage, and no probe holds the agent back: it waits for the health itself.
    assert [x["name"] for x in pod["spec"]["initContainers"]] == ["sandbox", "stage"]
    assert c["sandbox"]["restartPolicy"] == "Always" and "startupProbe" not in c["sandbox"]
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
    assert mounts == {("workspace", False), ("references", True), ("sandbox-tmp", False), ("sandbox-shm", False), ("token", True)}
    assert ("references", True) in {(x["name"], x.get("readOnly", False)) for x in c["agent"]["volumeMounts"]}
    assert c["stage"]["command"][:2] == ["gdpval", "stage"] and "--dest" in c["stage"]["command"]


def test_names_and_labels_fit_63_characters():
    long_sample = "x" * 51
    pod = m.sample_pod(ctx(LONG_RUN), long_sample, 12)
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
            "resources": {"agent": {"limits": {"memory": "3Gi", "cpu": 1}}, "jobs": {"requests": {"cpu": "100m"}}},
        }
    )
    pod = m.sample_pod(c, "s-r0", 1)
    spec = pod["spec"]
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q" and pod["metadata"]["annotations"]["a"] == "b"
    assert spec["nodeSelector"] == {"pool": "eval"} and spec["runtimeClassName"] == "gvisor" and spec["priorityClassName"] == "low"
    assert spec["serviceAccountName"] == "runner" and spec["automountServiceAccountToken"] is False
    assert containers(pod)["agent"]["resources"]["limits"] | {"ephemeral-storage": "-"} == {"memory": "3Gi", "cpu": "1", "ephemeral-storage": "-"}
    job = m.prepare_job(c)
    job_spec = job["spec"]["template"]["spec"]
    assert "runtimeClassName" not in job_spec and job_spec["tolerations"] == [{"key": "eval", "operator": "Exists"}]
    assert job_spec["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}
    assert job["spec"]["template"]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"


def test_our_labels_win_over_user_labels():
    pod = m.sample_pod(ctx(pod={"labels": {n.L_RUN_UID: "forged"}}), "s-r0", 1)
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
    assert m.sample_pod(c, "s-r0", 1)["spec"]["activeDeadlineSeconds"] == pod


JUDGE = {"judge": {"model": "judge-m", "baseURL": "http://10.250.0.1:8000/v1"}}


@pytest.mark.parametrize("build", [m.prepare_job, m.assemble_job, m.judge_job])
def test_the_jobs_request_cpu_and_memory_by_default_and_the_chart_and_spec_override(build):
    def judged(**spec) -> m.RunContext:
        return ctx(**JUDGE, **spec)

    def resources(c: m.RunContext) -> dict:
        return build(c)["spec"]["template"]["spec"]["containers"][0]["resources"]

    assert resources(judged()) == {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}  # Burstable, not BestEffort
    chart = PodDefaults.model_validate({"resources": {"jobs": {"requests": {"cpu": "1"}, "limits": {"memory": "4Gi"}}}})
    assert resources(dataclasses.replace(judged(), pod_defaults=chart)) == {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "4Gi"}}
    small = judged(pod={"resources": {"jobs": {"limits": {"memory": "128Mi", "cpu": "500m"}}}})
    lowered = {"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"memory": "128Mi", "cpu": "500m"}}  # requests within the limits
    assert resources(dataclasses.replace(small, pod_defaults=chart)) == lowered


def test_assemble_job():
    job = m.assemble_job(ctx())
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["gdpval", "submission", "build", "--run-name", "ns.demo-uid1", "--output", "s3://bucket/pre"]
    assert secret_refs(container) == {"s3creds"} and "OPENAI_API_KEY" not in env_names(container)
    assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_assemble_jobs_check_renders_in_the_same_sidecar_as_the_judge():
    """One builder serves both: the assemble Job gets the judge's render sidecar (the run's sandbox image), its volumes
    and the env naming it, so `gdpval check` there counts pages as locally; the sidecar holds no credential."""
    c = ctx(judge={"model": "judge-x", "baseURL": "http://10.250.0.1:8000/v1"})
    assemble, judge = (job["spec"]["template"]["spec"] for job in (m.assemble_job(c), m.judge_job(c)))
    assert assemble["initContainers"] == judge["initContainers"] and assemble["volumes"] == judge["volumes"]
    token, sidecar = assemble["initContainers"]
    assert sidecar["image"] == "sandbox:1" and sidecar["restartPolicy"] == "Always" and "env" not in token
    assert sidecar["env"] == [{"name": "HOME", "value": contract.SCRATCH}] and not secret_refs(sidecar)
    [main] = assemble["containers"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env[contract.RENDER_URL_ENV] == contract.SANDBOX_URL and env[contract.RENDER_IMAGE_ENV] == "sandbox:1"
    assert {v["name"] for v in main["volumeMounts"]} == {"scratch", "render", "render-token"} and "OPENAI_API_KEY" not in env
    assert [v for v in main["volumeMounts"] if v["name"] == "render-token"][0]["readOnly"]


def test_every_step_of_a_run_uses_its_own_folder_and_a_run_started_before_keeps_its_name():
    c = ctx()
    pod = containers(m.sample_pod(c, "s-r0", 1))
    steps = [pod["stage"]["command"], pod["agent"]["command"], m.assemble_job(c)["spec"]["template"]["spec"]["containers"][0]["command"]]
    assert all(cmd[cmd.index("--run-name") + 1] == "ns.demo-uid1" for cmd in steps)
    legacy = dataclasses.replace(c, legacy_storage=True)
    assert legacy.storage_name == "demo" and "demo" in m.sample_pod(legacy, "s-r0", 1)["spec"]["containers"][0]["command"]


def test_the_sandbox_token_travels_in_a_secret_never_in_the_pod_spec():
    c = ctx()
    pod = m.sample_pod(c, "task-1-r0", 1)
    secret = m.token_secret(c, "s3cr3t-token")
    assert "s3cr3t-token" not in json.dumps(pod) and secret["stringData"] == {contract.TOKEN_KEY: "s3cr3t-token"}
    assert secret["metadata"]["name"] == n.token_secret_name("demo") and secret["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "token")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"] and volume["secret"]["defaultMode"] == 0o440
    sandbox, agent = containers(pod)["sandbox"], containers(pod)["agent"]
    assert sandbox["command"][sandbox["command"].index("--token-file") + 1] == contract.TOKEN_FILE
    assert {"name": "token", "mountPath": contract.TOKEN_DIR, "readOnly": True} in sandbox["volumeMounts"]
    assert contract.TOKEN_FILE.startswith(contract.TOKEN_DIR + "/")
    token_env = next(e for e in agent["env"] if e["name"] == contract.TOKEN_ENV)
    assert token_env["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": contract.TOKEN_KEY}
    hold = next(e for e in agent["env"] if e["name"] == contract.OUTAGE_HOLD_ENV)
    assert hold["value"] == "300"  # spec.samples.outageHoldSeconds: how long the pod waits out an outage


def egress_of(policy):
    return [([t.get("ipBlock", {}).get("cidr") for t in r.get("to", [])], [p["port"] for p in r.get("ports", [])]) for r in policy["spec"]["egress"]]


def test_network_off_allows_the_two_endpoints_by_address_and_no_dns():
    """The endpoints are addresses: the pods need no resolver, so none is opened to the model's commands either."""
    policy = m.network_policy(ctx(), {})
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {n.L_RUN_UID: "uid-1", n.L_COMPONENT: "sample"}
    assert spec["ingress"] == [] and set(spec["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["metadata"]["name"] == n.network_policy_name("demo")
    assert egress_of(policy) == [(["10.250.0.1/32"], [8000]), (["10.250.0.1/32"], [9000])]
    pod = m.sample_pod(ctx(), "t1-r0", 1, resolved={})["spec"]
    assert (pod["dnsPolicy"], pod["dnsConfig"], pod["hostAliases"]) == ("None", {"nameservers": [net.NO_RESOLVER]}, [])


NAMED = {"model": {"name": "m", "baseURL": "https://models.example.com/v1"}, "output": {"url": "s3://b/p", "endpoint": "http://minio.internal:9000"}}
NAMES = {"models.example.com": ["192.0.2.7", "2001:db8::7"], "minio.internal": ["192.0.2.7"]}


def is_dns(rule) -> bool:
    return any(port["port"] == 53 for port in rule.get("ports", []))


def test_named_endpoints_are_pinned_in_the_pod_and_dns_is_closed():
    c = ctx(**NAMED)
    pod = m.sample_pod(c, "t1-r0", 1, resolved=NAMES)["spec"]
    assert pod["hostAliases"] == [
        {"ip": "192.0.2.7", "hostnames": ["minio.internal", "models.example.com"]},
        {"ip": "2001:db8::7", "hostnames": ["models.example.com"]},
    ]
    assert pod["dnsPolicy"] == "None" and not any(is_dns(rule) for rule in m.network_policy(c, NAMES)["spec"]["egress"])


@pytest.mark.parametrize(
    "change",
    [
        {"sandbox": {"network": True}},
        {"sandbox": {"allowedEgress": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}]}},
        {"output": {"url": "s3://b/p"}},  # AWS's own endpoint: bucket names are virtual hosts
        {"resolved": {"minio.internal": ["10.0.0.9"]}},  # the model's name did not resolve
    ],
    ids=["network-on", "allowed-egress", "aws-s3", "unresolved"],
)
def test_dns_stays_where_the_pods_may_need_it(change):
    resolved = change.pop("resolved", NAMES)
    c = ctx(**{**NAMED, **change})
    pod = m.sample_pod(c, "t1-r0", 1, resolved=resolved)["spec"]
    assert "hostAliases" not in pod and "dnsPolicy" not in pod
    egress = m.network_policy(c, resolved)["spec"]["egress"]
    assert c.spec.sandbox.network or any(is_dns(rule) for rule in egress)
    assert "dnsPolicy" not in m.sample_pod(ctx(**NAMED), "t1-r0", 1)["spec"], "addresses not known: the pod keeps DNS"


def test_named_endpoints_are_allowed_by_their_resolved_addresses_only():
    c = ctx(
        model={"name": "m", "baseURL": "https://models.example.com/v1"},
        output={"url": "s3://b/p", "endpoint": "http://minio.internal:9000"},
        sandbox={"allowedEgress": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}]},
    )
    assert net.hosts_to_resolve(c.spec) == ["minio.internal", "models.example.com"]
    resolved = {"models.example.com": ["2001:db8::7", "192.0.2.7", "192.0.2.7"], "minio.internal": ["10.0.0.9"]}
    egress = egress_of(m.network_policy(c, resolved))
    assert egress[1:3] == [(["192.0.2.7/32", "2001:db8::7/128"], [443]), (["10.0.0.9/32"], [9000])]
    assert m.network_policy(c, resolved)["spec"]["egress"][-1] == {"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}
    unresolved = egress_of(m.network_policy(c, {"minio.internal": ["10.0.0.9"]}))
    assert [rule for rule in unresolved if rule[1] == [443]] == [], "a name that did not resolve opens nothing, not its port"
    assert all(cidrs for cidrs, ports in unresolved[1:]), "no rule by port alone"


def test_default_endpoints_are_openai_and_aws():
    c = ctx(model={"name": "m"}, output={"url": "s3://b/p"})
    assert net.endpoints(c.spec) == [net.Endpoint("api.openai.com", 443), net.Endpoint("s3.amazonaws.com", 443)]
    assert net.Endpoint.of("http://[2001:db8::1]/v1") == net.Endpoint("2001:db8::1", 80) and net.Endpoint("2001:db8::1", 80).address == "2001:db8::1"


def test_network_on_reaches_anything_but_the_metadata_addresses():
    policy = m.network_policy(ctx(sandbox={"network": True, "allowedEgress": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}}]}]}))
    assert policy["metadata"]["name"] == n.network_policy_name("demo", network=True) != n.network_policy_name("demo")
    [rule] = policy["spec"]["egress"]
    blocks = {t["ipBlock"]["cidr"]: t["ipBlock"]["except"] for t in rule["to"]}
    assert blocks == {"0.0.0.0/0": ["169.254.0.0/16"], "::/0": ["fe80::/10", "fd00:ec2::254/128"]} and "ports" not in rule
    assert policy["spec"]["ingress"] == []


def resources(pod):
    return {name: c["resources"] for name, c in containers(pod).items()}


def test_sandbox_settings_become_the_sandbox_containers_limits_and_volume_sizes():
    pod = m.sample_pod(ctx(sandbox={"memoryMiB": 2048, "diskMiB": 3072, "cpus": 1.5}), "s-r0", 1)
    sandbox = resources(pod)["sandbox"]
    assert sandbox["limits"] == {"memory": "2048Mi", "ephemeral-storage": "3072Mi", "cpu": "1500m"}
    assert sandbox["requests"] == m.DEFAULT_REQUESTS, "small requests: a window of pods fits a modest node"
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["workspace"]["emptyDir"] == {"sizeLimit": "3072Mi"}
    assert volumes["sandbox-tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1024Mi"}, "/tmp is a tmpfs below the memory, as locally"
    assert volumes["sandbox-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}, "so is /dev/shm"
    assert {"name": "sandbox-tmp", "mountPath": contract.SCRATCH} in containers(pod)["sandbox"]["volumeMounts"]
    assert {"name": "sandbox-shm", "mountPath": "/dev/shm"} in containers(pod)["sandbox"]["volumeMounts"]
    assert volumes["references"]["emptyDir"] == {"sizeLimit": "4Gi"} and volumes["scratch"]["emptyDir"] == {"sizeLimit": "1Gi"}
    assert "cpu" not in resources(m.sample_pod(ctx(), "s-r0", 1))["sandbox"]["limits"], "no CPU quota unless spec.sandbox.cpus"


def test_every_sample_container_has_requests_and_limits_and_ephemeral_storage_adds_up_to_the_volumes():
    pod = m.sample_pod(ctx(pod={"volumes": {"references": "2Gi", "scratch": "512Mi"}}), "s-r0", 1)
    res = resources(pod)
    assert set(res) == {"stage", "sandbox", "agent"}
    assert all(set(r["requests"]) == {"cpu", "memory", "ephemeral-storage"} and {"memory", "ephemeral-storage"} <= set(r["limits"]) for r in res.values())
    assert res["agent"]["limits"]["ephemeral-storage"] == str(2 * 1024**3 + 512 * 1024**2) == res["stage"]["limits"]["ephemeral-storage"]
    volumes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["spec"]["volumes"] if "emptyDir" in v}
    assert volumes["references"] == "2Gi" and volumes["scratch"] == "512Mi"


def test_the_spec_wins_over_the_chart_which_wins_over_ours_key_by_key():
    chart = PodDefaults.model_validate(
        {
            "runtimeClassName": "gvisor",
            "resources": {"agent": {"limits": {"memory": "2Gi"}, "requests": {"cpu": "1"}}, "sandbox": {"limits": {"memory": "1Gi", "cpu": 4}}},
            "volumes": {"references": "8Gi", "scratch": "2Gi"},
        }
    )
    c = dataclasses.replace(
        ctx(sandbox={"memoryMiB": 3000}, pod={"resources": {"agent": {"limits": {"memory": "3Gi"}}}, "volumes": {"scratch": "256Mi"}}), pod_defaults=chart
    )
    pod = m.sample_pod(c, "s-r0", 1)
    res = resources(pod)
    assert res["agent"]["limits"]["memory"] == "3Gi" and res["agent"]["requests"]["cpu"] == "1", "spec over chart, chart over ours"
    assert res["sandbox"]["limits"]["memory"] == "3000Mi", "spec.sandbox.memoryMiB means the sandbox's memory: it wins over the chart"
    assert res["sandbox"]["limits"]["cpu"] == "4", "without spec.sandbox.cpus the chart's CPU limit holds"
    volumes = {v["name"]: v["emptyDir"]["sizeLimit"] for v in pod["spec"]["volumes"] if "emptyDir" in v}
    assert volumes["references"] == "8Gi" and volumes["scratch"] == "256Mi"
    assert pod["spec"]["runtimeClassName"] == "gvisor" and "runtimeClassName" not in m.prepare_job(c)["spec"]["template"]["spec"]
    own = dataclasses.replace(ctx(pod={"runtimeClassName": "kata"}), pod_defaults=chart)
    assert m.sample_pod(own, "s-r0", 1)["spec"]["runtimeClassName"] == "kata"


def test_the_charts_pod_defaults_reach_the_operator_as_json(monkeypatch):
    monkeypatch.setenv(POD_DEFAULTS_ENV, json.dumps({"runtimeClassName": "gvisor", "volumes": {"scratch": "2Gi"}}))
    pod = Defaults.from_env().pod
    assert pod.runtime_class_name == "gvisor" and pod.volumes.scratch == "2Gi"
    monkeypatch.setenv(POD_DEFAULTS_ENV, json.dumps({"volumes": {"scratch": "two gigs"}}))
    with pytest.raises(SystemExit, match=r"podDefaults\) is not valid: volumes.scratch: Value error, 'two gigs' is not a quantity"):
        Defaults.from_env()
    monkeypatch.delenv(POD_DEFAULTS_ENV)
    assert Defaults.from_env().pod == PodDefaults()


def test_a_default_request_above_a_lower_limit_comes_down_to_it():
    res = resources(m.sample_pod(ctx(pod={"resources": {"stage": {"limits": {"memory": "100Mi", "cpu": "50m"}}}}), "s-r0", 1))["stage"]
    assert res["requests"]["memory"] == "100Mi" and res["requests"]["cpu"] == "50m" and res["limits"]["memory"] == "100Mi"


@pytest.mark.parametrize("bad", ["4 GB", "lots", "1.2.3Gi", ""])
def test_quantities_are_checked_when_the_spec_is_parsed(bad):
    with pytest.raises(ValidationError, match="not a quantity"):
        ctx(pod={"resources": {"sandbox": {"limits": {"memory": bad}}}})
    with pytest.raises(ValidationError, match="not a quantity"):
        ctx(pod={"volumes": {"scratch": bad}})
    assert re.fullmatch(QUANTITY_REGEX, bad) is None


@pytest.mark.parametrize("good", ["4Gi", "500m", "1.5", "1e3", "128974848", ".5Gi"])
def test_kubernetes_quantities_pass_both_checks(good):
    assert ctx(pod={"volumes": {"scratch": good}}).spec.pod.volumes.scratch == good and re.fullmatch(QUANTITY_REGEX, good)


def test_event_targets_the_run():
    ev = m.event("demo", "ns", "uid-1", "GdpvalRun", "Running", "x" * 2000, "2026-01-01T00:00:00Z", "abc", warning=True)
    assert ev["involvedObject"]["uid"] == "uid-1" and ev["type"] == "Warning" and len(ev["message"]) == 1024
    assert ev["metadata"]["name"] == "demo.abc"

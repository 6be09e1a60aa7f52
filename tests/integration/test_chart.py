"""The Helm chart (charts/gdpval) rendered with the real `helm` binary, one values set at a time.

Covers what values change: RBAC scope, CRD handling, the uninstall hook, metrics objects, images;
and what must hold for every values set: one operator, restricted Pod Security, no wildcard RBAC.
The helpers (rendering, the tools) live in tests/support/chart.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from gdpval.api.v1alpha1 import POD_DEFAULTS_ENV, PodDefaults
from gdpval.controller.effects.worker import Defaults
from support.chart import CHART, NAMESPACE, RELEASE, VARIANTS, helm, is_hook, of_kind, one, operator_container, render, set_args


def watched_flags(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == "--namespace"]


# --- Restricted Pod Security Standard -----------------------------------------------------------

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod_spec: dict) -> list[str]:
    """The checks of the `restricted` Pod Security Standard (v1.34) that a chart can get wrong."""
    problems = []
    psc = pod_spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(key):
            problems.append(f"{key} is set")
    for volume in pod_spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"volume {volume['name']} uses {kinds - ALLOWED_VOLUMES}")
    containers = (pod_spec.get("initContainers") or []) + pod_spec["containers"]
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps.get('add')}")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot must be true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            problems.append(f"{name}: hostPort")
    return problems


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    out = {}
    for d in docs:
        if d["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            out[f"{d['kind']}/{d['metadata']['name']}"] = d["spec"]["template"]["spec"]
    return out


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request) -> tuple[str, list[dict]]:
    return request.param, render(VARIANTS[request.param])


# --- lint -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_helm_lint_is_clean(name: str) -> None:
    proc = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *set_args(VARIANTS[name]))
    out = proc.stdout + proc.stderr
    assert "0 chart(s) failed" in out
    assert not re.search(r"\[(WARNING|ERROR)\]", out), out


# --- invariants of every values set -----------------------------------------------------------


def test_exactly_one_operator_and_recreate(variant) -> None:
    _, docs = variant
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not of_kind(docs, "HorizontalPodAutoscaler")


def test_leader_election_by_default_and_standby_replicas() -> None:
    """The Lease guards even one replica (an old pod still stopping); more replicas need it and roll."""
    docs = render()
    [container] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["args"][-3:] == ["--leader-elect", "--lease-name", one(docs, "Deployment")["metadata"]["name"]]
    [rule] = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election"))["rules"]
    assert rule == {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}
    deployment = one(render({"operator": {"replicas": 2, "leaderElection": {"leaseName": "ops"}}}), "Deployment")
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--lease-name", "ops"]
    off = render({"operator": {"leaderElection": {"enabled": False}}})
    assert "--leader-elect" not in one(off, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [d for d in off if d["metadata"]["name"].endswith("-leader-election")]
    proc = helm("template", RELEASE, str(CHART), *set_args({"operator": {"replicas": 2, "leaderElection": {"enabled": False}}}), check=False)
    assert proc.returncode != 0 and "needs operator.leaderElection.enabled" in proc.stderr


def test_every_pod_meets_restricted_pss(variant) -> None:
    name, docs = variant
    specs = pod_specs(docs)
    assert specs
    for pod, spec in specs.items():
        assert restricted_violations(spec) == [], f"{name}: {pod}"
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert "memory" in c["resources"]["limits"]


def test_no_wildcards_and_no_escalation_verbs(variant) -> None:
    _, docs = variant
    for role in of_kind(docs, "Role") + of_kind(docs, "ClusterRole"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), f"{role['metadata']['name']}: {rule}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
            assert not {"roles", "clusterroles", "rolebindings", "clusterrolebindings"} & set(rule["resources"])
            if "secrets" in rule["resources"]:
                assert rule["verbs"] == ["get", "create"], "Secrets are read by name and each run's token Secret created; never listed or changed"


def test_objects_are_labelled_and_namespaced(variant) -> None:
    _, docs = variant
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    for d in docs:
        labels = d["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        if d["kind"] in cluster_scoped:
            assert "namespace" not in d["metadata"]
        else:
            assert d["metadata"]["namespace"]


def test_names_fit_kubernetes_limits(variant) -> None:
    _, docs = variant
    for d in docs:
        limit = 253 if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition") else 63
        assert len(d["metadata"]["name"]) <= limit


# --- RBAC scope ---------------------------------------------------------------------------------


def _operator_roles(docs: list[dict], kind: str) -> list[dict]:
    """The rights to reconcile runs (not the hooks', nor the leader-election Lease's)."""
    return [d for d in of_kind(docs, kind) if not is_hook(d) and not d["metadata"]["name"].endswith("-leader-election")]


def test_default_watches_only_the_release_namespace() -> None:
    docs = render()
    roles = _operator_roles(docs, "Role")
    assert [(r["metadata"]["namespace"], r["metadata"]["name"]) for r in roles] == [(NAMESPACE, f"{RELEASE}-gdpval")]
    [binding] = _operator_roles(docs, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-gdpval", "namespace": NAMESPACE}]
    assert watched_flags(operator_container(docs)["args"]) == [NAMESPACE]
    # The only cluster-scoped grant: reading namespaces, CRDs and Kueue priority classes.
    (cluster_role,) = _operator_roles(docs, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloadpriorityclasses"], "verbs": ["get"]},
    ]


def test_operator_rules_cover_what_it_does() -> None:
    (role,) = _operator_roles(render(), "Role")
    grants = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    needed = {
        ("gdpval.io", "gdpvalruns", "list"),
        ("gdpval.io", "gdpvalruns", "watch"),
        ("gdpval.io", "gdpvalruns/status", "patch"),
        ("", "pods", "create"),
        ("", "pods", "delete"),
        ("", "pods", "watch"),
        ("", "pods", "get"),
        ("", "pods", "patch"),
        ("batch", "jobs", "create"),
        ("batch", "jobs", "delete"),
        ("batch", "jobs", "watch"),
        ("", "configmaps", "get"),
        ("", "configmaps", "create"),
        ("", "configmaps", "patch"),
        ("networking.k8s.io", "networkpolicies", "create"),
        ("networking.k8s.io", "networkpolicies", "patch"),
        ("", "secrets", "get"),
        ("", "secrets", "create"),
        ("", "events", "create"),
        # Children carry blockOwnerDeletion: OwnerReferencesPermissionEnforcement (OpenShift) refuses them without it.
        ("gdpval.io", "gdpvalruns/finalizers", "update"),
        # A run queued whole in Kueue: its Workload, and that Workload's status.
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads/status", "patch"),
    }
    assert needed <= grants
    # The operator writes status only: no update/patch of runs, so no finalizer can be added by it.
    assert ("gdpval.io", "gdpvalruns", "patch") not in grants
    assert ("gdpval.io", "gdpvalruns", "update") not in grants


def test_watch_namespaces_get_a_role_each() -> None:
    docs = render(VARIANTS["namespaces"])
    roles = _operator_roles(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for binding in [d for d in of_kind(docs, "RoleBinding") if not is_hook(d)]:
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert watched_flags(operator_container(docs)["args"]) == ["team-a", "team-b"]


def test_cluster_wide_uses_one_cluster_role_and_no_namespace_flag() -> None:
    docs = render(VARIANTS["cluster-wide"])
    assert not _operator_roles(docs, "Role")
    (cluster_role,) = _operator_roles(docs, "ClusterRole")
    assert cluster_role["metadata"]["name"] == f"{NAMESPACE}-{RELEASE}-gdpval"
    resources = {r for rule in cluster_role["rules"] for r in rule["resources"]}
    assert {"gdpvalruns", "gdpvalruns/finalizers", "pods", "jobs", "customresourcedefinitions"} <= resources
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert watched_flags(operator_container(docs)["args"]) == []


def test_discovery_can_be_turned_off() -> None:
    docs = render({"rbac": {"discovery": False}})
    assert not of_kind(docs, "ClusterRole") and not of_kind(docs, "ClusterRoleBinding")


def test_rbac_and_service_account_can_be_brought_by_the_user() -> None:
    docs = render(VARIANTS["no-rbac"])
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ServiceAccount")]
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"
    proc = helm("template", RELEASE, str(CHART), *set_args({"serviceAccount": {"create": False}}), check=False)
    assert proc.returncode != 0 and "serviceAccount.name is required" in proc.stderr


# --- CRD handling ---------------------------------------------------------------------------------


def test_crd_is_a_kept_template_by_default() -> None:
    crds = of_kind(render(), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == ["gdpvalpools.gdpval.io", "gdpvalruns.gdpval.io"]
    for crd in crds:
        annotations = crd["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert annotations["argocd.argoproj.io/sync-options"] == "Delete=false"
    assert not (CHART / "crds").exists(), "CRDs in crds/ are never upgraded by Helm"


def test_crd_can_be_left_out_or_not_kept() -> None:
    assert not of_kind(render(VARIANTS["no-crd"]), "CustomResourceDefinition")
    crds = of_kind(render(VARIANTS["crd-not-kept"]), "CustomResourceDefinition")
    assert crds and all("helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {}) for crd in crds)


# --- images, metrics, hook ----------------------------------------------------------------------


def test_images_default_to_app_version_and_reach_the_operator() -> None:
    docs = render()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    container = operator_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == f"localhost/gdpval-operator:{chart['appVersion']}"
    assert env["GDPVAL_AGENT_IMAGE"] == container["image"]
    assert env["GDPVAL_SANDBOX_IMAGE"] == f"localhost/gdpval-sandbox:full-{chart['appVersion']}"
    assert container["command"] == ["gdpval", "operator"]
    port = container["ports"][0]["containerPort"]
    assert container["args"][container["args"].index("--metrics-port") + 1] == str(port)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_digest_and_scheduling_values() -> None:
    docs = render(VARIANTS["digest"])
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == "localhost/gdpval-operator@sha256:" + "a" * 64
    assert env["GDPVAL_SANDBOX_IMAGE"] == "registry.example/gdpval-sandbox:full-1"
    assert env["X"] == "1" and container["args"][-1] == "--verbose"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["priorityClassName"] == "system-cluster-critical"
    template_meta = one(docs, "Deployment")["spec"]["template"]["metadata"]
    assert template_meta["labels"]["team"] == "eval" and template_meta["annotations"] == {"a": "b"}


def test_pod_defaults_reach_the_operator_as_the_json_it_parses(monkeypatch) -> None:
    pod = {"runtimeClassName": "gvisor", "resources": {"agent": {"limits": {"memory": "2Gi", "cpu": 2}}}, "volumes": {"references": "8Gi"}}
    env = {e["name"]: e.get("value") for e in operator_container(render({"podDefaults": pod}))["env"]}
    monkeypatch.setenv(POD_DEFAULTS_ENV, env[POD_DEFAULTS_ENV])
    assert Defaults.from_env().pod == PodDefaults.model_validate(pod)
    default = {e["name"]: e.get("value") for e in operator_container(render())["env"]}[POD_DEFAULTS_ENV]
    monkeypatch.setenv(POD_DEFAULTS_ENV, default)
    assert Defaults.from_env().pod == PodDefaults(runtime_class_name="")


def test_metrics_service_selects_only_the_operator() -> None:
    docs = render()
    service = one(docs, "Service")
    deployment = one(docs, "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "operator"
    assert not of_kind(docs, "ServiceMonitor")
    monitor = one(render(VARIANTS["monitoring"]), "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert not of_kind(render({"metrics": {"service": {"enabled": False}}}), "Service")


def test_service_monitor_without_service_is_refused() -> None:
    values = {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}}
    proc = helm("template", RELEASE, str(CHART), *set_args(values), check=False)
    assert proc.returncode != 0 and "needs metrics.service.enabled" in proc.stderr


def test_uninstall_hook_is_off_by_default() -> None:
    assert not [d for d in render() if is_hook(d)]


@pytest.mark.parametrize("name", ["hook", "hook-cluster-wide", "hook-namespaces"])
def test_uninstall_hook_objects(name: str) -> None:
    values = VARIANTS[name]
    docs = render(values)
    hooks = [d for d in docs if is_hook(d)]
    assert hooks
    for d in hooks:
        annotations = d["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["argocd.argoproj.io/hook"] == "PostDelete"
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    job = one(hooks, "Job")
    assert int(job["metadata"]["annotations"]["helm.sh/hook-weight"]) > max(
        int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for d in hooks if d["kind"] != "Job"
    ), "RBAC and the script exist before the Job starts"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OPERATOR_DEPLOYMENT"] == one(docs, "Deployment")["metadata"]["name"]
    assert env["FINALIZERS"] == "gdpval.io/finalizer"
    selector = dict(p.split("=") for p in env["OPERATOR_SELECTOR"].split(","))
    assert selector == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    run_rules = [r for d in hooks if d["kind"] in ("Role", "ClusterRole") for r in d["rules"] if "gdpvalruns" in r["resources"]]
    assert run_rules
    delete = values["uninstall"].get("deleteRuns", False)
    for rule in run_rules:
        assert ("delete" in rule["verbs"]) == delete
    cluster_wide = values.get("operator", {}).get("clusterWide", False)
    assert env["WATCH_NAMESPACES"] == ("" if cluster_wide else " ".join(values.get("operator", {}).get("watchNamespaces", [NAMESPACE])))
    script = one(hooks, "ConfigMap")["data"]["release-runs.py"]
    assert script == (CHART / "files" / "release-runs.py").read_text()
    # Scaling is limited to this release's Deployment.
    scale_rule = next(r for d in hooks if d["kind"] == "Role" for r in d["rules"] if "deployments/scale" in r["resources"])
    assert scale_rule["resourceNames"] == [one(docs, "Deployment")["metadata"]["name"]]


# --- values schema ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 2}, "replicas"),
        ({"strategy": {"type": "RollingUpdate"}}, "strategy"),
        ({"operator": {"watchNamespaces": ["Not_A_Namespace"]}}, "watchNamespaces"),
        ({"operator": {"metricsPort": 80}}, "metricsPort"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"crds": {"install": "yes"}}, "install"),
        ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, "interval"),
        ({"podDefaults": {"resources": {"sandbox": {"limit": {"memory": "1Gi"}}}}}, "limit"),
        ({"podDefaults": {"volumes": {"workspace": "10Gi"}}}, "workspace"),
        ({"podDefaults": {"runtimeClass": "gvisor"}}, "runtimeClass"),
    ],
)
def test_values_schema_refuses(values: dict, message: str) -> None:
    proc = helm("template", RELEASE, str(CHART), *set_args(values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_notes_tell_the_next_steps() -> None:
    proc = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert f"rollout status deployment/{RELEASE}-gdpval" in notes
    assert "get gdpvalruns" in notes and "--for=condition=Succeeded" in notes
    assert "kubectl delete crd gdpvalruns.gdpval.io" in notes


def _leaf_keys(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict) and node:
        out: set[str] = set()
        for key, value in node.items():
            out |= _leaf_keys(value, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix}


def test_readme_documents_every_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.M))
    missing = {k for k in _leaf_keys(values) if k not in documented and not any(k.startswith(d + ".") for d in documented)}
    assert not missing, f"values missing from the README table: {sorted(missing)}"
    stale = {d for d in documented if not any(k == d or k.startswith(d + ".") for k in _leaf_keys(values))}
    assert not stale, f"README documents values that do not exist: {sorted(stale)}"

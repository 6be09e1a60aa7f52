"""The webhook configurations the Kueue fixture writes can never hold another test's objects."""

from __future__ import annotations

import base64
from pathlib import Path

from support.kueue import NAMESPACE_LABEL, manager_configuration, webhook_configurations


def hook(name: str, resources: list[str], path: str) -> dict:
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": resources}
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [rule],
    }


UPSTREAM = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "mutating-webhook-configuration"},
        "webhooks": [hook("mpod.kb.io", ["pods"], "/mutate--v1-pod"), hook("mjob.kb.io", ["jobs"], "/mutate-batch-v1-job")],
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "validating-webhook-configuration"},
        "webhooks": [
            hook("vworkload.kb.io", ["workloads", "workloads/status"], "/validate-workload"),
            hook("vclusterqueue.kb.io", ["clusterqueues"], "/validate-clusterqueue"),
            hook("vraycluster.kb.io", ["rayclusters"], "/validate-raycluster"),
        ],
    },
]


def test_only_the_pod_and_queue_webhooks_are_kept_called_by_url_and_failing_open():
    mutating, validating = webhook_configurations(UPSTREAM, "https://127.0.0.1:9443", b"PEM", "ns-1")
    assert [h["name"] for h in mutating["webhooks"]] == ["mpod.kb.io"]
    assert [h["name"] for h in validating["webhooks"]] == ["vworkload.kb.io", "vclusterqueue.kb.io"]
    assert mutating["metadata"] == {"name": "gdpval-test-kueue-ns-1-mutating", "labels": {NAMESPACE_LABEL: "ns-1"}}
    for h in mutating["webhooks"] + validating["webhooks"]:
        assert h["failurePolicy"] == "Ignore" and h["timeoutSeconds"] <= 5
        assert base64.b64decode(h["clientConfig"]["caBundle"]) == b"PEM" and "service" not in h["clientConfig"]
    assert mutating["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate--v1-pod"
    namespaced = {h["name"]: h.get("namespaceSelector") for h in mutating["webhooks"] + validating["webhooks"]}
    assert namespaced == {
        "mpod.kb.io": {"matchLabels": {NAMESPACE_LABEL: "ns-1"}},
        "vworkload.kb.io": {"matchLabels": {NAMESPACE_LABEL: "ns-1"}},
        "vclusterqueue.kb.io": None,
    }
    assert UPSTREAM[0]["webhooks"][0]["failurePolicy"] == "Fail"  # the input is left as it was


def test_the_manager_manages_pods_of_the_one_namespace_only():
    config = manager_configuration("ns-1", 9443, 8081, Path("/certs"))
    assert config["integrations"] == {"frameworks": ["pod"]} and config["managedJobsNamespaceSelector"] == {"matchLabels": {NAMESPACE_LABEL: "ns-1"}}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": "/certs"} and config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False} and config["metrics"] == {"bindAddress": "0"}

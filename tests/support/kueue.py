"""Kueue's manager as a host process against the local test cluster (tests/cluster/kueue/test_kueue.py).

The API server is a host process, so it reaches Kueue's webhooks at https://127.0.0.1:<port> with a
self-signed certificate; Kueue's own certificate management is off. Every webhook this writes fails
open (`Ignore`) and the namespaced ones apply only to namespaces labelled with this instance's name,
so a crashed test leaves no webhook that could refuse or hold another test's pod.
"""

from __future__ import annotations

import base64
import copy
import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.minio import die_with_parent, free_port
from infra.paths import HACK, cache_dir, versions
from support.operator import established
from support.polling import wait_until

# The namespace label that selects what this Kueue manages; its value is the namespace's own name.
NAMESPACE_LABEL = "gdpval.io/test-kueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# Kueue's scheduling gate on a pod it has not admitted yet.
ADMISSION_GATE = "kueue.x-k8s.io/admission"
# Kueue's finalizer on the pods it manages (removed once a pod has ended and its Workload is done).
KUEUE_FINALIZER = "kueue.x-k8s.io/managed"
# What the pod integration needs: pods themselves, and the queue objects and Workloads it uses.
WEBHOOK_RESOURCES = frozenset({"pods", "workloads", "clusterqueues", "localqueues", "resourceflavors", "cohorts"})
CLUSTER_SCOPED = frozenset({"clusterqueues", "resourceflavors", "cohorts"})


def kueue_dir() -> Path:
    return cache_dir() / "kueue" / versions()["KUEUE_VERSION"]


def ensure_kueue() -> Path:
    """Kueue's cache folder (bin/kueue, crd/, webhook/), built if missing; waits for a build under way."""
    root = kueue_dir()
    if not (root / "bin" / "kueue").is_file() or not (root / "crd" / ".complete").is_file():
        subprocess.run([str(HACK / "build-tools.sh"), "kueue"], check=True)
    return root


def manager_configuration(namespace: str, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration: the pod integration only, for `namespace` only, no leader election,
    no certificate management, no metrics or visibility servers."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "managedJobsNamespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace}},
        "integrations": {"frameworks": ["pod"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def webhook_configurations(upstream: list[dict[str, Any]], base_url: str, ca_pem: bytes, namespace: str) -> list[dict[str, Any]]:
    """Kueue's own webhook configurations cut down to WEBHOOK_RESOURCES, called by URL, failing open,
    and (where the object is namespaced) limited to `namespace`."""
    out = []
    for config in upstream:
        hooks = []
        for hook in config["webhooks"]:
            resources = {r.split("/")[0] for rule in hook["rules"] for r in rule["resources"]}
            if not resources <= WEBHOOK_RESOURCES:
                continue
            hook = copy.deepcopy(hook)
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            hook["failurePolicy"] = "Ignore"
            hook["timeoutSeconds"] = 5
            if not resources <= CLUSTER_SCOPED:
                hook["namespaceSelector"] = {"matchLabels": {NAMESPACE_LABEL: namespace}}
            hooks.append(hook)
        name = f"gdpval-test-kueue-{namespace}-{'mutating' if config['kind'].startswith('Mutating') else 'validating'}"
        out.append({**config, "metadata": {"name": name, "labels": {NAMESPACE_LABEL: namespace}}, "webhooks": hooks})
    return out


def self_signed_certificate(folder: Path) -> bytes:
    """tls.crt and tls.key for 127.0.0.1 in `folder`; returns the certificate (its own CA)."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=kueue-webhook-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(folder / "tls.key"),
            "-out",
            str(folder / "tls.crt"),
        ],
        check=True,
        capture_output=True,
    )
    return (folder / "tls.crt").read_bytes()


# Without its own certificate management Kueue reads a metrics certificate from the fixed path
# /etc/kueue/metrics/certs; a private mount namespace overlays it on /etc without writing the host's.
_WITH_METRICS_CERTS = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc && shift && exec "$@"'


@dataclass
class KueueManager:
    """One Kueue manager process and the webhook configurations pointing at it."""

    kube: Any  # support.operator.Kube, for the test's namespace
    folder: Path
    health_port: int
    proc: subprocess.Popen

    @property
    def log(self) -> str:
        return (self.folder / "kueue.log").read_text(errors="replace")

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"kueue exited with {self.proc.returncode}:\n{self.log[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def gates_pods(kube: Any) -> bool:
    """A pod with a queue label, created in `kube.namespace` as a dry run, comes back behind Kueue's
    gate: the API server has Kueue's webhooks and reaches them."""
    security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True, "runAsUser": 1000}
    container = {"name": "probe", "image": "localhost/kueue-probe:none", "securityContext": security}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kueue-probe", "labels": {QUEUE_LABEL: "probe"}},
        "spec": {"containers": [container], "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}},
    }
    done = kube.run("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False)
    gates = json.loads(done.stdout)["spec"].get("schedulingGates", []) if done.returncode == 0 else []
    return any(g["name"] == ADMISSION_GATE for g in gates)


def delete_stale_webhooks(kube: Any) -> None:
    """Webhook configurations an earlier, crashed test left for a namespace that no longer exists."""
    kinds = "mutatingwebhookconfigurations,validatingwebhookconfigurations"
    listed = json.loads(kube.run("get", kinds, "-l", NAMESPACE_LABEL, "-o", "json").stdout)["items"]
    alive = set(kube.run("get", "namespaces", "-o", "name").stdout.split())
    for item in listed:
        if f"namespace/{item['metadata']['labels'][NAMESPACE_LABEL]}" not in alive:
            kube.run("delete", item["kind"].lower(), item["metadata"]["name"], "--ignore-not-found", check=False)


# What Kueue puts finalizers on: in the namespace, and (labelled with it) the cluster's queue objects.
_NAMESPACED = "pods,workloads.kueue.x-k8s.io,localqueues.kueue.x-k8s.io"
_CLUSTER = "clusterqueues.kueue.x-k8s.io,resourceflavors.kueue.x-k8s.io,workloadpriorityclasses.kueue.x-k8s.io"


def release(kube: Any) -> None:
    """Delete what Kueue holds finalizers on while it still runs (so it removes them), then strip any
    left, so neither the namespace nor the cluster keeps an object that waits for a stopped Kueue."""
    mine = f"{NAMESPACE_LABEL}={kube.namespace}"
    kube.run("delete", _NAMESPACED, "--all", "--timeout=90s", check=False, timeout=120)
    kube.run("delete", _CLUSTER, "-l", mine, "--timeout=60s", check=False, timeout=120)
    for args in ((_NAMESPACED,), (_CLUSTER, "-l", mine)):
        for name in kube.run("get", *args, "-o", "name", check=False).stdout.split():
            kube.run("patch", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}', check=False)


@contextmanager
def kueue_manager(kube: Any, root: Path, folder: Path, timeout: float = 120) -> Iterator[KueueManager]:
    """Kueue from its build folder `root` (`ensure_kueue`) for `kube.namespace` (labelled here), ready to
    admit; stopped and its webhooks deleted at exit. `folder` (empty) gets its certificate, configuration and log."""
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(root / "crd"))
    for crd in ("workloads", "clusterqueues", "localqueues", "resourceflavors"):
        wait_until(lambda crd=crd: established(kube, f"{crd}.kueue.x-k8s.io"), 60, f"Kueue's {crd} CRD to be established")
    delete_stale_webhooks(kube)
    kube.run("label", "namespace", kube.namespace, f"{NAMESPACE_LABEL}={kube.namespace}", "--overwrite")
    certs = folder / "upper" / "kueue" / "metrics" / "certs"
    certs.mkdir(parents=True)
    (folder / "work").mkdir()
    ca = self_signed_certificate(certs)
    webhook_port, health_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(manager_configuration(kube.namespace, webhook_port, health_port, certs)))
    upstream = list(yaml.safe_load_all((root / "webhook" / "manifests.yaml").read_text()))
    hooks = webhook_configurations(upstream, f"https://127.0.0.1:{webhook_port}", ca, kube.namespace)
    cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _WITH_METRICS_CERTS, "sh", str(folder)]
    cmd += [str(root / "bin" / "kueue"), f"--config={config}", f"--kubeconfig={kube.kubeconfig}", "--zap-log-level=2"]
    with open(folder / "kueue.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
    manager = KueueManager(kube, folder, health_port, proc)
    try:
        kube.run("apply", "-f", "-", input=yaml.safe_dump_all(hooks))
        wait_until(lambda: manager.ready() and gates_pods(kube), timeout, "Kueue's webhook to gate a pod in the namespace")
        yield manager
    finally:
        try:
            release(kube)
        finally:
            manager.stop()
            for hook in hooks:
                kube.run("delete", hook["kind"].lower(), hook["metadata"]["name"], "--ignore-not-found", check=False)

"""The Helm chart on the real local cluster: install, a run over the 12-task sample, upgrade, uninstall.

- `helm install` runs the operator in-cluster from the locally built image (hack/images.sh), in a
  namespace that enforces the `restricted` Pod Security Standard;
- a GdpvalRun that names no images gets the chart's defaults (agent = operator image, sandbox =
  the slim sandbox image) and succeeds against the fake model and MinIO;
- `helm upgrade` with a changed value mid-run replaces the operator pod (never two at once) and
  the run still completes with every task committed exactly once;
- `helm uninstall` removes every object of the release but the kept CRD; runs left behind delete
  at once; with the uninstall hook enabled, a run held by `gdpval.io/finalizer` is released.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from gdpval.fakemodel.server import start_background
from infra.paths import cache_dir
from support.operator import Kube, established, image_ref, install_crd, restricted_namespace, result_keys, run_folder, run_manifest, upload_tree
from support.standins import make_standin_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gdpval"
CRD_NAME = "gdpvalruns.gdpval.io"
CRD_NAMES = (CRD_NAME, "gdpvalpools.gdpval.io")


def operator_image() -> str:
    """The image hack/images.sh built last (read after the cluster fixture rebuilt it); overridable."""
    return os.environ.get("GDPVAL_TEST_OPERATOR_IMAGE") or image_ref("operator", "localhost/gdpval-operator:dev")


def sandbox_image() -> str:
    return os.environ.get("GDPVAL_TEST_SANDBOX_IMAGE") or image_ref("sandbox-slim", "localhost/gdpval-sandbox:slim-dev")


OPERATOR_SELECTOR = "app.kubernetes.io/name=gdpval,app.kubernetes.io/component=operator"
TASKS = 12
RUN_TIMEOUT = 900
HOOK_RELEASE = "gdpval-hook"


def helm_binary() -> str:
    cache = Path(os.environ.get("GDPVAL_CACHE", "/var/cache/gdpval-dev")) / "tools" / "bin" / "helm"
    for candidate in (os.environ.get("GDPVAL_HELM"), str(cache), shutil.which("helm")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("helm not found: run hack/build-tools.sh kubectl-helm, or set GDPVAL_HELM")


def split_ref(ref: str) -> tuple[str, str]:
    repository, _, tag = ref.rpartition(":")
    return repository, tag


class Helm:
    def __init__(self, kubeconfig: str, namespace: str, release: str, values_dir: Path):
        self.kubeconfig, self.namespace, self.release, self.values_dir = kubeconfig, namespace, release, values_dir

    def __call__(self, *args: str, values: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
        # Helm 4 wants the subcommand first: flags before it are taken for a plugin name.
        cmd = [helm_binary(), *args, "--kubeconfig", self.kubeconfig, "--namespace", self.namespace]
        if values is not None:
            path = self.values_dir / f"values-{secrets.token_hex(4)}.yaml"
            path.write_text(yaml.safe_dump(values))
            cmd += ["--values", str(path)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def base_values(self) -> dict:
        repo, tag = split_ref(operator_image())
        sandbox_repo, sandbox_tag = split_ref(sandbox_image())
        return {
            "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"},
            "sandboxImage": {"repository": sandbox_repo, "tag": sandbox_tag},
            "terminationGracePeriodSeconds": 10,
        }


def install(kube: Kube, helm: Helm, values: dict) -> None:
    """helm install --wait; on failure, say why the operator pod is not ready."""
    try:
        helm("install", helm.release, str(CHART), "--wait", "--timeout", "5m", values=values)
    except AssertionError as exc:
        pods = kube.run("get", "pods", "-l", OPERATOR_SELECTOR, "-o", "wide", check=False).stdout
        logs = kube.run("logs", "-l", OPERATOR_SELECTOR, "--tail=30", "--previous", check=False).stdout
        raise AssertionError(f"{exc}\n--- operator pods ---\n{pods}\n--- last operator log ---\n{logs}") from None


def adopt_crd(kube: Kube, release: str, namespace: str) -> None:
    """CRDs kept by an earlier release (or applied by hand) are handed to this release, as a user would.

    The shared test cluster may hold the CRDs of an older tree, applied by kubectl; they are brought to
    this tree's first, or helm's server-side apply would conflict with kubectl's fields.
    """
    present = [crd for crd in CRD_NAMES if kube.run("get", "crd", crd, check=False).returncode == 0]
    if not present:
        return
    install_crd(kube)
    for crd in CRD_NAMES:
        kube.run("label", "crd", crd, "--overwrite", "app.kubernetes.io/managed-by=Helm")
        kube.run("annotate", "crd", crd, "--overwrite", f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}")


def operator_pods(kube: Kube) -> list[dict]:
    return (kube.get("pods", selector=OPERATOR_SELECTOR) or {}).get("items", [])


def live(pods: list[dict]) -> list[str]:
    """Pods that can be reconciling: running and not on their way out."""
    return [p["metadata"]["name"] for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def refused_calls(log: str) -> list[str]:
    """API calls the operator's RBAC refused, as kopf and the operator log them."""
    return [line for line in log.splitlines() if "Forbidden" in line or " 403" in line][:5]


class PodWatcher(threading.Thread):
    """Samples the operator pods while an upgrade runs, to prove there were never two at once."""

    def __init__(self, kube: Kube):
        super().__init__(daemon=True)
        self.kube, self.stop, self.max_live, self.seen = kube, threading.Event(), 0, set()

    def run(self) -> None:
        while not self.stop.is_set():
            names = live(operator_pods(self.kube))
            self.max_live = max(self.max_live, len(names))
            self.seen.update(names)
            time.sleep(0.2)


@pytest.fixture(scope="module")
def setup(cluster, cluster_s3, sample_dataset, tmp_path_factory):
    namespace = f"gdpval-helm-{secrets.token_hex(3)}"
    kube = Kube(str(cluster.kubeconfig), namespace)
    restricted_namespace(kube, cluster_s3)
    bucket = cluster_s3.make_bucket()
    client = cluster_s3.client()
    upload_tree(client, bucket, "dataset", make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset")))
    helm = Helm(str(cluster.kubeconfig), namespace, "gdpval", tmp_path_factory.mktemp("values"))
    # A slow model keeps the run going long enough to upgrade the operator in the middle of it.
    with start_background(host=cluster.node_ip, port=0, latency=0.4) as model:
        yield kube, helm, bucket, client, cluster_s3.endpoint_url, model.base_url
    for release in (helm.release, HOOK_RELEASE):
        subprocess.run(
            [helm_binary(), "uninstall", release, "--ignore-not-found", "--kubeconfig", helm.kubeconfig, "-n", namespace], capture_output=True, timeout=300
        )
    kube.run("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def crd_owner():
    """The CRD is cluster-wide and each of these tests hands it to its own release: held by one test
    at a time, across workers and sessions. Two at once (a fresh run handed both out together) made
    one's `helm upgrade` fail on the other's annotations of the CRD."""
    path = cache_dir() / "locks" / "helm-crd.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.mark.long
def test_install_run_upgrade_uninstall(setup, crd_owner):
    kube, helm, bucket, client, endpoint, model_url = setup
    ns = kube.namespace

    # install: the operator runs in-cluster from the local image, in a restricted namespace.
    adopt_crd(kube, helm.release, ns)
    install(kube, helm, helm.base_values())
    kube.wait_for(lambda: established(kube, CRD_NAME), 60, "the chart's CRD to be established")
    (first_pod,) = kube.wait_for(lambda: live(operator_pods(kube)), 120, "the operator pod running")
    pod = kube.get("pod", first_pod)
    assert pod["spec"]["containers"][0]["image"] == operator_image()
    assert pod["spec"]["containers"][0]["command"] == ["gdpval", "operator"]
    assert pod["spec"]["containers"][0]["args"][:2] == ["--namespace", ns]

    # a run that names no images: the chart's defaults reach the operator.
    manifest = run_manifest(
        "via-helm",
        ns,
        model_url=model_url,
        dataset=f"s3://{bucket}/dataset",
        output_url=f"s3://{bucket}/out",
        endpoint=endpoint,
        images=("", ""),
        parallelism=3,
    )
    manifest["spec"].pop("images")
    kube.apply(manifest)
    kube.wait_for(lambda: int((kube.run_status("via-helm").get("progress") or "0/").split("/")[0] or 0) >= 2, RUN_TIMEOUT, "two samples finished")
    sample = (kube.get("pods", selector="gdpval.io/run=via-helm,app.kubernetes.io/component=sample") or {}).get("items", [])
    images = {c["name"]: c["image"] for p in sample for c in p["spec"]["containers"] + p["spec"].get("initContainers", [])}
    if images:
        assert images.get("agent") == operator_image() and images.get("sandbox") == sandbox_image(), images

    assert refused_calls(kube.run("logs", first_pod).stdout) == []

    # upgrade mid-run with a changed value: a new operator pod, never two at once.
    deployment_before = kube.get("deployment", f"{helm.release}")["metadata"]["generation"]
    watcher = PodWatcher(kube)
    watcher.start()
    try:
        values = helm.base_values() | {
            "podAnnotations": {"gdpval.io/upgraded": "yes"},
            "resources": {"requests": {"cpu": "60m", "memory": "128Mi"}, "limits": {"memory": "640Mi"}},
        }
        helm("upgrade", helm.release, str(CHART), "--wait", "--timeout", "5m", values=values)
        (second_pod,) = kube.wait_for(lambda: live(operator_pods(kube)), 120, "the upgraded operator pod")
    finally:
        watcher.stop.set()
        watcher.join()
    assert second_pod != first_pod
    assert watcher.max_live == 1, f"two operators were running at once: {watcher.seen}"
    assert kube.get("deployment", helm.release)["metadata"]["generation"] > deployment_before
    assert kube.get("pod", second_pod)["metadata"]["annotations"]["gdpval.io/upgraded"] == "yes"

    # the run survives the operator's replacement: every task committed exactly once.
    done = kube.run("wait", "--for=condition=Succeeded", "gdpvalrun/via-helm", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 30)
    assert done.returncode == 0, json.dumps(kube.run_status("via-helm"), indent=1)
    status = kube.run_status("via-helm")
    assert status["progress"] == f"{TASKS}/{TASKS}" and status["samples"]["succeeded"] == TASKS
    committed = result_keys(client, bucket, "out", run_folder(status))
    assert len(committed) == TASKS and all(len(a) == 1 for a in committed.values()), committed

    # Least privilege, but enough: no API call of either operator pod was refused.
    assert refused_calls(kube.run("logs", second_pod).stdout) == []

    # uninstall: nothing of the release stays but the kept CRD; the run deletes at once.
    helm("uninstall", helm.release, "--wait", "--timeout", "5m")
    leftovers = kube.run(
        "get", "deployment,serviceaccount,role,rolebinding,service,configmap,job", "-l", f"app.kubernetes.io/instance={helm.release}", "-o", "name"
    ).stdout.split()
    assert leftovers == []
    cluster_scoped = kube.run("get", "clusterrole,clusterrolebinding", "-o", "name").stdout.split()
    assert not [n for n in cluster_scoped if f"{ns}-{helm.release}" in n]
    crd = json.loads(kube.run("get", "crd", CRD_NAME, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert kube.run_status("via-helm")["state"] == "Succeeded", "uninstall must not take the runs with it"
    kube.run("delete", "gdpvalrun", "via-helm", "--timeout=30s")
    kube.wait_for(lambda: not (kube.get("pods") or {}).get("items"), 120, "no pod left in the namespace")


def test_uninstall_hook_releases_finalizers(setup, crd_owner):
    kube, helm, bucket, client, endpoint, model_url = setup
    ns = kube.namespace
    release = HOOK_RELEASE
    hooked = Helm(helm.kubeconfig, ns, release, helm.values_dir)
    adopt_crd(kube, release, ns)
    install(kube, hooked, hooked.base_values() | {"uninstall": {"releaseFinalizers": True}})
    kube.wait_for(lambda: live(operator_pods(kube)), 120, "the operator pod running")
    # A finalizer the operator does not add itself (an older build, or another tool) holds the run.
    manifest = run_manifest(
        "held",
        ns,
        model_url=model_url,
        dataset=f"s3://{bucket}/dataset",
        output_url=f"s3://{bucket}/out-held",
        endpoint=endpoint,
        images=("", ""),
        suspend=True,
    )
    manifest["spec"].pop("images")
    manifest["metadata"]["finalizers"] = ["gdpval.io/finalizer"]
    kube.apply(manifest)
    kube.run("delete", "gdpvalrun", "held", "--wait=false")
    assert kube.get("gdpvalrun", "held")["metadata"].get("deletionTimestamp"), "the finalizer holds the run"

    hooked("uninstall", release, "--wait", "--timeout", "5m")
    kube.wait_for(lambda: kube.get("gdpvalrun", "held") is None, 60, "the held run gone after uninstall")
    hook_objects = kube.run("get", "job,serviceaccount,configmap,role,rolebinding", "-l", "app.kubernetes.io/component=uninstall", "-o", "name").stdout.split()
    assert hook_objects == [], "hook objects are deleted once the hook succeeded"
    assert not live(operator_pods(kube))

"""The Helm chart (charts/gdpval) rendered with the real `helm` binary, and the tools the chart tests
run (helm, kubeconform): shared by tests/integration/test_chart*.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.paths import HACK
from infra.paths import REPO_ROOT as ROOT

CHART = ROOT / "charts" / "gdpval"
RELEASE, NAMESPACE = "gdp", "gdpval-system"


def find_tool(name: str) -> str | None:
    """$GDPVAL_<NAME>, then hack/build-tools.sh's cache, then PATH."""
    explicit = os.environ.get(f"GDPVAL_{name.upper()}")
    cache = Path(os.environ.get("GDPVAL_CACHE", "/var/cache/gdpval-dev")) / "tools" / "bin" / name
    for candidate in (explicit, str(cache), shutil.which(name)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


# The hack/build-tools.sh target that provides a tool (cached; a build under way is waited for on its lock).
BUILT_BY = {"helm": "kubectl-helm", "kubectl": "kubectl-helm", "kubeconform": "kubeconform"}


def require_tool(name: str) -> str:
    """The tool's path, built first when the setup can build it (as root) and it is missing, so a
    test that runs while setup's background builds still run waits for it instead of skipping.
    Otherwise a missing tool skips locally but fails in CI, where it must be provided."""
    path = find_tool(name)
    if path is None and name in BUILT_BY and os.geteuid() == 0:
        subprocess.run([str(HACK / "build-tools.sh"), BUILT_BY[name]], capture_output=True, check=False, timeout=1800)
        path = find_tool(name)
    if path is None:
        message = f"{name} not found: run hack/build-tools.sh, or set GDPVAL_{name.upper()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([require_tool("helm"), *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


_VALUES_DIR = Path(tempfile.mkdtemp(prefix="gdpval-chart-values-"))


def set_args(values: dict[str, Any] | None) -> list[str]:
    """Values as a file, so lists and nested maps keep their types."""
    if not values:
        return []
    fd, path = tempfile.mkstemp(suffix=".yaml", dir=_VALUES_DIR)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(values, f)
    return ["--values", path]


def render_text(values: dict[str, Any] | None = None, *extra: str) -> str:
    return helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *set_args(values), *extra).stdout


def render(values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render_text(values, *extra)) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def operator_container(docs: list[dict]) -> dict:
    """The operator Deployment's container."""
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def is_hook(doc: dict) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


# Values sets that together reach every branch of the templates.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaces": {"operator": {"watchNamespaces": ["team-a", "team-b"]}},
    "cluster-wide": {"operator": {"clusterWide": True}},
    "hook": {"uninstall": {"releaseFinalizers": True, "deleteRuns": True}},
    "hook-cluster-wide": {"operator": {"clusterWide": True}, "uninstall": {"releaseFinalizers": True}},
    "hook-namespaces": {"operator": {"watchNamespaces": ["team-a"]}, "uninstall": {"releaseFinalizers": True}},
    "monitoring": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}},
    "no-crd": {"crds": {"install": False}},
    "crd-not-kept": {"crds": {"keep": False}},
    "no-rbac": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "existing"}},
    "prepull": {
        "prepull": {
            "enabled": True,
            "extraImages": ["registry.example/sandbox:custom"],
            "nodeSelector": {"gdpval.io/samples": "true"},
            "tolerations": [{"key": "gdpval", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-node-critical",
        },
        "imagePullSecrets": [{"name": "pull"}],
    },
    "digest": {
        "image": {"digest": "sha256:" + "a" * 64},
        "sandboxImage": {"repository": "registry.example/gdpval-sandbox", "tag": "full-1"},
        "imagePullSecrets": [{"name": "pull"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "gdpval", "operator": "Exists", "effect": "NoSchedule"}],
        "podAnnotations": {"a": "b"},
        "podLabels": {"team": "eval"},
        "priorityClassName": "system-cluster-critical",
        "operator": {"extraArgs": ["--verbose"], "extraEnv": [{"name": "X", "value": "1"}]},
    },
}

"""The local Kubernetes cluster for tests: brought up (or reused) through hack/cluster.sh."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import HACK, cache_dir


def _hack(*args: str, timeout: float | None = None) -> str:
    proc = subprocess.run([str(HACK / args[0]), *args[1:]], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return proc.stdout


def cluster_env() -> dict[str, str]:
    out = _hack("cluster.sh", "env")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@dataclass
class Cluster:
    """What a test needs to use the cluster: the admin kubeconfig, the node, kubectl, images."""

    kubeconfig: Path
    node_name: str
    node_ip: str
    kubectl_path: str
    images: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """Environment for a subprocess (kubectl, helm, the operator) that talks to this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.kubectl_path, "--kubeconfig", str(self.kubeconfig), *args], input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def apply(self, manifest: dict[str, Any] | str, check: bool = True) -> subprocess.CompletedProcess:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        return self.kubectl("apply", "-f", "-", input=text, check=check)


def image_refs() -> dict[str, str]:
    """Image refs recorded by hack/images.sh: base, pause, operator, sandbox-slim."""
    refs = cache_dir() / "images" / "refs"
    if not refs.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in refs.iterdir() if p.is_file()}


def bring_up(images: bool = True) -> Cluster:
    """Start the cluster unless it is already up (a no-op then), and build/import the images."""
    if os.geteuid() != 0:
        raise RuntimeError("the local cluster needs root (containerd, kubelet, network setup)")
    _hack("cluster.sh", "up")
    if images:
        _hack("images.sh", "all")
    return current()


def current() -> Cluster:
    env = cluster_env()
    return Cluster(
        kubeconfig=Path(env["KUBECONFIG"]),
        node_name=env["NODE_NAME"],
        node_ip=env["NODE_IP"],
        kubectl_path=env["KUBECTL"],
        images=image_refs(),
    )


def tear_down() -> None:
    _hack("cluster.sh", "down")

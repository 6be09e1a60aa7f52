"""A throwaway etcd + kube-apiserver of its own (loopback ports, a temporary folder, a static admin token).

For work that must not load the shared test cluster's API server (the operator scale benchmark).
It reuses the cluster's cached binaries; no scheduler, controller-manager or kubelet runs.
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.paths import REPO_ROOT, cache_dir, versions
from support.processes import free_port, stop

TOKEN = "bench-admin-token"


def binaries() -> tuple[Path, Path]:
    """kube-apiserver and etcd as hack/ builds and caches them (built when missing)."""
    k8s = cache_dir() / "kubernetes" / versions()["K8S_VERSION"] / "bin"
    etcd = cache_dir() / "prefix" / "etcd-server" / "usr" / "bin" / "etcd"
    if not (k8s / ".complete").exists():
        subprocess.run(["bash", str(REPO_ROOT / "hack" / "build-k8s.sh")], check=True)
    if not etcd.exists():
        subprocess.run(["bash", str(REPO_ROOT / "hack" / "cluster-prereqs.sh"), "--no-build"], check=True)
    return k8s / "kube-apiserver", etcd


@dataclass(frozen=True)
class ControlPlane:
    root: Path
    kubeconfig: Path
    api_url: str
    etcd_url: str
    token: str = TOKEN

    @property
    def ca(self) -> Path:
        """The API server's self-signed certificate with its CA (valid for 127.0.0.1), written at its start."""
        return self.root / "certs" / "apiserver.crt"

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))


def _etcd_args(etcd: Path, root: Path, client: int, peer: int) -> list[str]:
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    return [
        str(etcd),
        *("--data-dir", str(root / "etcd")),
        *("--listen-client-urls", client_url, "--advertise-client-urls", client_url),
        *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
        *("--initial-cluster", f"default={peer_url}"),
    ]


def _apiserver_args(apiserver: Path, root: Path, etcd_url: str, port: int) -> list[str]:
    return [
        str(apiserver),
        *("--etcd-servers", etcd_url, "--bind-address", "127.0.0.1", "--secure-port", str(port)),
        *("--cert-dir", str(root / "certs"), "--token-auth-file", str(root / "tokens.csv"), "--authorization-mode", "AlwaysAllow"),
        *("--service-account-key-file", str(root / "sa.pub"), "--service-account-signing-key-file", str(root / "sa.key")),
        *("--service-account-issuer", "https://kubernetes.default.svc", "--service-cluster-ip-range", "10.98.0.0/16"),
    ]


def _kubeconfig(api_url: str, ca: Path, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "cp",
        "clusters": [{"name": "cp", "cluster": {"server": api_url, "certificate-authority": str(ca)}}],
        "users": [{"name": "admin", "user": {"token": TOKEN}}],
        "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "admin", "namespace": namespace}}],
    }


def _wait_ready(plane: ControlPlane, procs: list[subprocess.Popen], timeout: float) -> None:
    insecure = ssl._create_unverified_context()  # the certificate is made by the API server as it starts
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        try:
            request = urllib.request.Request(f"{plane.api_url}/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
            with urllib.request.urlopen(request, timeout=5, context=insecure) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("kube-apiserver did not become ready: " + (plane.root / "apiserver.log").read_text(errors="replace")[-3000:])


@contextmanager
def control_plane(root: Path, namespace: str = "default", timeout: float = 120) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver under `root`, stopped (SIGTERM) on exit; the data stays in `root`."""
    apiserver, etcd = binaries()
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "genrsa", "-out", root / "sa.key", "2048"], check=True, capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", root / "sa.key", "-pubout", "-out", root / "sa.pub"], check=True, capture_output=True)
    (root / "tokens.csv").write_text(f"{TOKEN},admin,admin,system:masters\n")
    client, peer, api = free_port(), free_port(), free_port()
    plane = ControlPlane(root, root / "kubeconfig", f"https://127.0.0.1:{api}", f"http://127.0.0.1:{client}")
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(_etcd_args(etcd, root, client, peer), stdout=open(root / "etcd.log", "w"), stderr=subprocess.STDOUT))
        procs.append(
            subprocess.Popen(_apiserver_args(apiserver, root, plane.etcd_url, api), stdout=open(root / "apiserver.log", "w"), stderr=subprocess.STDOUT)
        )
        _wait_ready(plane, procs, timeout)
        plane.kubeconfig.write_text(yaml.safe_dump(_kubeconfig(plane.api_url, plane.ca, namespace)))
        yield plane
    finally:
        for proc in reversed(procs):
            stop(proc)

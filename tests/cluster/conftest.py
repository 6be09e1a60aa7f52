"""Fixtures shared by the cluster tests: one restricted namespace with its operator, MinIO bucket,
dataset and scripted model per session (per xdist worker), and a bystander pod in it. Tests give
their runs distinct names and leave the operator running, so sharing makes none depend on another."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdpval.fakemodel.server import start_background
from infra.paths import REPO_ROOT
from support.kueue import ensure_kueue
from support.netprobe import BYSTANDER_PORT, LISTEN, RESTRICTED_CONTAINER
from support.operator import Env, operator_namespace
from support.standins import make_standin_dataset


@pytest.fixture(scope="session")
def env(cluster, cluster_s3, sample_dataset, tmp_path_factory) -> Iterator[Env]:
    """A restricted namespace with the CRD, S3 credentials, the dataset in MinIO and the operator."""
    dataset = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset"))
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-op", dataset, tmp_path_factory.mktemp("operator")) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
    ):
        yield Env(ns.kube, ns.operator, ns.bucket, ns.client, ns.endpoint, model.base_url, cluster.node_ip, dataset, ns.images)


@pytest.fixture(scope="session")
def node_listener(env: Env) -> Iterator[tuple[str, int]]:
    """Another server on the node address, the one the model and S3 use, on another port."""
    with socket.create_server((env.node_ip, 0)) as server:
        yield env.node_ip, server.getsockname()[1]


@pytest.fixture(scope="session")
def bystander(env: Env) -> tuple[str, str]:
    """A pod without any policy, listening on BYSTANDER_PORT: (name, pod IP). Ready once the kubelet's own
    connection succeeds: a started container is not yet a listening one (refused at load 8 on a fresh machine)."""
    name = "bystander"
    listening = {"tcpSocket": {"port": BYSTANDER_PORT}, "periodSeconds": 1}
    container = {
        "name": "main",
        "image": env.images[1],
        "imagePullPolicy": "Never",
        "command": ["python3", "-c", LISTEN],
        "readinessProbe": listening,
        **RESTRICTED_CONTAINER,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bystander"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    env.kube.apply(pod)
    env.kube.run("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout=150)
    ip = env.kube.get("pod", name)["status"]["podIP"]
    with socket.create_connection((ip, BYSTANDER_PORT), timeout=10):
        pass  # listening, and reachable from the node
    return name, ip


@pytest.fixture(scope="session")
def full_image(cluster) -> str:
    """This tree's full sandbox image (images/sandbox/build.sh, about 2.5 GB), built if needed and in the cluster's containerd."""
    build = REPO_ROOT / "images" / "sandbox" / "build.sh"
    for step in ("build", "import"):
        done = subprocess.run(["bash", str(build), step], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"images/sandbox/build.sh {step} failed: {done.stderr[-3000:]}"
    return subprocess.run(["bash", str(build), "tag"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="session")
def kueue() -> Path:
    """Kueue's build folder (bin/kueue, crd/, webhook/), which setup builds in the background once the cluster
    is up; asking for it orders a test after the cluster tier's others (tests/conftest.py)."""
    return ensure_kueue()

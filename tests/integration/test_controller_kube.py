"""`Kube` against an API server that accepts connections and never answers: every call gives up."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from kubernetes import client

from gdpval.api import v1alpha1 as api
from gdpval.controller.effects.kube import Kube

MANIFEST = {"metadata": {"name": "x", "namespace": "ns"}}
SPEC = api.GdpvalRunSpec.model_validate({"model": {"name": "m", "apiKeySecretRef": {"name": "key", "key": "k"}}, "output": {"url": "s3://b/p"}})
CALLS = {
    "check_secrets": ("ns", SPEC),
    "pod_exists": ("ns", "p"),
    "patch_pod": ("ns", "p", {}),
    "read_ledger": ("ns", "l", "uid"),
    "create_ledger": (MANIFEST,),
    "write_ledger": ("ns", "l", {}, "1"),
    "create_pod": (MANIFEST,),
    "delete_pod": ("ns", "p"),
    "create_job": (MANIFEST,),
    "delete_job": ("ns", "j"),
    "ensure_network_policy": (MANIFEST,),
    "ensure_secret": (MANIFEST,),
    "post_event": (MANIFEST,),
    "patch_status": ("ns", "r", {}),
}


@pytest.fixture(scope="module")
def silent_server():
    """Accepts every connection, reads nothing, answers nothing: a hung API server or proxy."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


@pytest.mark.parametrize("method", sorted(CALLS))
def test_every_call_times_out(silent_server, method):
    configuration = client.Configuration(host=silent_server)
    kube = Kube(client.ApiClient(configuration))
    kube.timeout = (1.0, 0.5)  # the default, shortened
    outcome: list[BaseException | None] = []

    def call() -> None:
        try:
            getattr(kube, method)(*CALLS[method])
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the outcome is inspected below
            outcome.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive(), f"Kube.{method} still waits on a server that never answers"
    assert outcome and outcome[0] is not None and time.monotonic() - started < 4

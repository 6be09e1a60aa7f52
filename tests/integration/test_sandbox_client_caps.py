"""The runner's side of the tool server's socket: a forged server that floods or drips cannot hold more
than MAX_REPLY_BYTES in memory or keep a call past its deadline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gdpval.sandbox import client as client_module
from gdpval.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable

OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"


def serve(path: Path, answer: Callable[[socket.socket], None]) -> Iterator[str]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    answer(conn)
                except OSError:
                    pass

    threading.Thread(target=loop, daemon=True).start()
    yield f"unix:{path}"
    stop.set()
    listener.close()


def flood(conn: socket.socket) -> None:
    conn.sendall(OK_HEAD + b"Content-Length: 300000000\r\n\r\n")
    chunk = b" " * 1_000_000
    for _ in range(300):
        conn.sendall(chunk)


def drip(conn: socket.socket) -> None:
    conn.sendall(OK_HEAD + b"Content-Length: 1000\r\n\r\n")
    for _ in range(1000):
        conn.sendall(b" ")
        time.sleep(0.1)


@pytest.fixture
def flooding(tmp_path: Path) -> Iterator[str]:
    yield from serve(tmp_path / "f.sock", flood)


@pytest.fixture
def dripping(tmp_path: Path) -> Iterator[str]:
    yield from serve(tmp_path / "d.sock", drip)


def test_a_flood_is_refused_after_the_cap(flooding: str) -> None:
    with pytest.raises(SandboxError, match=f"more than {client_module.MAX_REPLY_BYTES} bytes"):
        SandboxClient(flooding, "t").call("bash", {"command": "true"}, timeout=5)


def test_a_dripping_reply_ends_at_the_call_deadline(dripping: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "TIMEOUT_MARGIN_S", 1.0)
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable, match="no complete reply within 2 s"):
        SandboxClient(dripping, "t").call("bash", {"command": "true"}, timeout=1)
    assert time.monotonic() - started < 30  # the drip would last 100 s; a loaded machine may add seconds

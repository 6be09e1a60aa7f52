"""The pre-flight check against real local servers with the real openai client: a closed port, a
socket that takes connections but never answers, one whose backlog is full, and an HTTP server that
is up but failing. Each ends the run in one line that says what happened."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gdpval.agent.client import make_client, preflight
from gdpval.errors import GdpvalError

TIMEOUT = 0.5


def refusal(base_url: str) -> str:
    with pytest.raises(GdpvalError) as caught:
        preflight(make_client(base_url), "scripted", timeout=TIMEOUT)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_closed_port_is_connection_refused():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    assert refusal(f"http://127.0.0.1:{port}/v1") == (
        f"cannot reach the model endpoint http://127.0.0.1:{port}/v1/ (connection refused): check --base-url and that the server is running"
    )


@contextmanager
def silent_server() -> Iterator[str]:
    """Accepts every connection and never writes a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
        for conn in held:
            conn.close()


def test_a_server_that_never_answers_times_out_after_the_timeout():
    with silent_server() as base_url:
        started = time.monotonic()
        message = refusal(base_url)
    assert message == (
        f"the model endpoint {base_url}/ accepted the connection but did not answer: timed out after 0.5 s, twice: is the server overloaded or stuck?"
    )
    assert time.monotonic() - started < 10


def test_a_server_with_a_full_backlog_is_a_connect_timeout():
    """Linux drops new SYNs while a listener's accept queue is full: the connection itself times out."""
    with socket.create_server(("127.0.0.1", 0), backlog=0) as listener, socket.create_connection(listener.getsockname()):
        message = refusal(f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    assert "did not accept a connection: timed out after 0.5 s, twice" in message


class Failing(BaseHTTPRequestHandler):
    """Answers every request with the server's `status` and `body`."""

    def do_GET(self) -> None:
        status, body = self.server.reply  # type: ignore[attr-defined]
        payload = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextmanager
def http_server(status: int, body: str) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    server.reply = (status, body)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_busy_server_is_reported_with_its_status_and_body():
    body = '{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'
    with http_server(503, body) as base_url:
        message = refusal(base_url)
    assert message == (f"the model endpoint {base_url}/ is up but answered HTTP 503 ({body}): wait until it is ready (still loading a model?) or check its log")


def test_a_long_error_body_is_cut_to_one_short_line():
    with http_server(500, "Traceback (most recent call last):\n" + "  frame\n" * 200 + "RuntimeError: boom\n") as base_url:
        message = refusal(base_url)
    quoted = message.split("answered HTTP 500 (", 1)[1].split("): wait", 1)[0]
    assert quoted.startswith("Traceback (most recent call last): frame frame") and quoted.endswith("…") and len(quoted) == 200


def test_a_server_without_a_models_list_passes():
    with http_server(404, '{"detail": "Not Found"}') as base_url:
        assert preflight(make_client(base_url), "scripted", timeout=TIMEOUT) is None

"""HTTP front of the scripted model: an OpenAI-compatible chat completions server.

Standard library only (``ThreadingHTTPServer``), so it runs wherever the package
does. Only the configured model name is served; any other gets OpenAI's 404
``model_not_found``, which catches a misconfigured ``--model`` early.

Tests steer a running server through ``/fake/``: ``POST /fake/hold`` (body ``{"after": n}``) lets
``n`` more chat completions through and then holds every reply, ``POST /fake/release`` lets them
all go (body ``{"cut": true}``: answered 503 instead, as a server does when its client is gone),
``GET /fake/stats`` returns the counters, ``held`` among them. A test can so act (send a signal,
kill a process) while requests are certainly in flight, whatever the machine's load, and then see
that what was cut is asked again and nothing answered is: ``judge_repeats`` counts judge requests
answered that are identical to one answered before.

Two endpoint-wide faults: an outage (`outage_after` chat requests, then every model API request,
the models list included, answers 503 for `outage_seconds`), and a concurrency cap (a chat request
arriving while `max_concurrent` others are in flight answers 429 with Retry-After), like a provider's
rate limit on requests at once.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gdpval.fakemodel.model import FakeModel, FakeModelConfig, Reply, error_reply, invalid


class _Handler(BaseHTTPRequestHandler):
    """Thin HTTP adapter over ``FakeModel``; keep-alive so clients reuse connections."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid the 40 ms ACK stall
    server: _HTTPServer

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self._send(invalid("Content-Length must be an integer."))
            return
        raw = self.rfile.read(length) if length > 0 else b""
        with self.server.app.answering(self.path):
            try:
                reply = self.server.app.handle(method, self.path, self.headers.get("Authorization"), raw)
            except Exception as exc:  # a bug must still answer, or the client waits for its timeout
                reply = error_reply(500, f"fake model bug: {type(exc).__name__}: {exc}", "server_error", None)
            if reply.delay > 0:
                time.sleep(reply.delay)
            self._send(reply)

    def _send(self, reply: Reply) -> None:
        if reply.events is not None:
            lines = [f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for event in reply.events] + ["data: [DONE]\n\n"]
            payload, kind = "".join(lines).encode("utf-8"), "text/event-stream"
        else:
            payload, kind = json.dumps(reply.body, ensure_ascii=False).encode("utf-8"), "application/json"
        self.send_response(reply.status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: one line per request would drown the runner's own output."""


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address: tuple[str, int], app: FakeModel) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.app = app
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (e.g. timed out during a slow reply) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Cut idle keep-alive connections so stop() leaves no handler thread behind."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class FakeModelServer:
    """A running fake model; a context manager that stops the server on exit."""

    def __init__(self, host: str, port: int, config: FakeModelConfig) -> None:
        self.app = FakeModel(config)
        self._httpd = _HTTPServer((host, port), self.app)
        self.host = host
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._serve_forever, name="fake-model", daemon=True)
        self._stopped = False

    def _serve_forever(self) -> None:
        """A short poll interval keeps stop() quick; the idle cost is negligible."""
        self._httpd.serve_forever(poll_interval=0.05)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def start(self) -> FakeModelServer:
        self._thread.start()
        return self

    def stats(self) -> dict[str, Any]:
        return self.app.stats()

    def hold(self, after: int = 0) -> None:
        """Let ``after`` more chat completions through, then hold every reply until ``release``."""
        self.app.gate.hold(after)

    def release(self, cut: bool = False) -> None:
        """Let every held reply go; with `cut`, answer each with a 503 instead (its client is gone)."""
        self.app.gate.release(cut)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.app.gate.release()  # held handlers answer and end
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.close_connections()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_background(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    model: str = "scripted",
    api_key: str | None = None,
    faults: dict[str, float] | None = None,
    seed: int = 0,
    retry_after: float = 1.0,
    latency: float = 0.0,
    slow_seconds: float = 2.0,
    fault_repeats: int = 1,
    hold_after: int | None = None,
    judge_prefers: str = "content",
    dialects: tuple[str, ...] = (),
    outage_after: int | None = None,
    outage_seconds: float = 0.0,
    max_concurrent: int | None = None,
    make_files: bool = False,
) -> FakeModelServer:
    """Start the server on a daemon thread; port 0 picks a free port."""
    config = FakeModelConfig(
        model,
        api_key,
        faults or {},
        seed,
        retry_after,
        slow_seconds,
        fault_repeats,
        latency,
        hold_after,
        judge_prefers,
        tuple(dialects),
        outage_after,
        outage_seconds,
        max_concurrent,
        make_files,
    )
    return FakeModelServer(host, port, config).start()


def serve(host: str, port: int, **options: Any) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly; options are start_background's."""
    server = start_background(host, port, **options)
    stop = threading.Event()
    previous = _install_signal_handlers(stop)
    print(f"fake-model: serving model {server.app.config.model!r} at {server.base_url}", file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _install_signal_handlers(stop: threading.Event) -> dict[int, Any]:
    """Turn SIGTERM/SIGINT into a stop request; only possible on the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, lambda *_: stop.set())
    return previous

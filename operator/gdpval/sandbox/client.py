"""Client of the sandbox tool server over loopback TCP or a unix socket (stdlib http.client).

The server runs inside the sandbox, so its replies are untrusted: a reply is read up to
MAX_REPLY_BYTES, and each call has a total deadline that a watchdog enforces by shutting the
socket, so a server that drips bytes cannot stretch a call past it.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

TIMEOUT_MARGIN_S = 30.0  # the server's kill grace and response time on top of the tool timeout
HEALTH_TIMEOUT_S = 2.0
MAX_REPLY_BYTES = 2 * 1024 * 1024  # the server keeps 30,000 characters of output: at most ~200 KB of JSON
MAX_ERROR_CHARS = 500


class SandboxUnavailable(Exception):
    """The tool server cannot be reached: refused, reset, gone or unresponsive."""


class SandboxError(Exception):
    """The tool server answered but refused the call (4xx) or answered something unusable."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ToolOutput:
    output: str
    exit_code: int
    timed_out: bool
    truncated: bool
    duration_s: float


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a unix socket; the host name only fills the Host header."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _cut(conn: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The deadline passed: shut the socket so the blocked read returns at once."""
    expired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class SandboxClient:
    """Calls one sandbox's tools; a fresh connection per call keeps it safe across threads."""

    def __init__(self, address: str, token: str) -> None:
        self.address = address
        self.token = token
        if address.startswith("unix:"):
            self._unix_path: str | None = address[len("unix:") :]
            self._host, self._port = "", 0
        else:
            parts = urlsplit(address)
            if parts.scheme != "http" or not parts.hostname or not parts.port:
                raise ValueError(f"sandbox address {address!r}: use http://127.0.0.1:PORT or unix:/path")
            self._unix_path, self._host, self._port = None, parts.hostname, parts.port

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._unix_path is not None:
            return UnixHTTPConnection(self._unix_path, timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _request(self, method: str, path: str, body: dict | None, timeout: float) -> tuple[int, dict]:
        """One request, over within `timeout` seconds in all, whatever pace the server keeps."""
        conn = self._connection(timeout)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        expired = threading.Event()
        watchdog = threading.Timer(timeout, _cut, (conn, expired))
        watchdog.daemon = True
        watchdog.start()
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(MAX_REPLY_BYTES + 1)
            if expired.is_set():
                raise TimeoutError("cut at the deadline")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            why = f"no complete reply within {timeout:g} s" if expired.is_set() else f"unreachable: {exc!r}"
            raise SandboxUnavailable(f"sandbox at {self.address} {why}") from None
        finally:
            watchdog.cancel()
            conn.close()
        if len(raw) > MAX_REPLY_BYTES:
            raise SandboxError(f"sandbox answered more than {MAX_REPLY_BYTES} bytes", resp.status)
        try:
            payload = json.loads(raw)
        except ValueError:
            raise SandboxError(f"sandbox answered {resp.status} with non-JSON", resp.status) from None
        return resp.status, payload if isinstance(payload, dict) else {}

    def call(self, tool: str, arguments: dict, timeout: float) -> ToolOutput:
        """Run `tool`; the server enforces `timeout`, the HTTP read allows a margin beyond it."""
        body = {**arguments, "timeout": timeout}
        status, payload = self._request("POST", f"/v1/tools/{quote(tool, safe='')}", body, timeout + TIMEOUT_MARGIN_S)
        if status != 200:
            raise SandboxError(f"sandbox refused {tool}: {status} {str(payload.get('error', ''))[:MAX_ERROR_CHARS]}".strip(), status)
        try:
            return ToolOutput(
                output=str(payload["output"]),
                exit_code=int(payload["exit_code"]),
                timed_out=bool(payload["timed_out"]),
                truncated=bool(payload["truncated"]),
                duration_s=float(payload["duration_s"]),
            )
        except (KeyError, TypeError, ValueError):
            raise SandboxError(f"sandbox answered a malformed {tool} result", status) from None

    def healthy(self) -> bool:
        try:
            status, payload = self._request("GET", "/healthz", None, HEALTH_TIMEOUT_S)
        except (SandboxUnavailable, SandboxError):
            return False
        return status == 200 and payload.get("ok") is True

    def wait_ready(self, timeout: float) -> None:
        """Poll /healthz until the server answers; raise SandboxUnavailable at the deadline."""
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if time.monotonic() >= deadline:
                raise SandboxUnavailable(f"sandbox at {self.address} not ready after {timeout:g} s")
            time.sleep(0.05)

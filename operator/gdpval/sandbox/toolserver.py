#!/usr/bin/env python3
"""GDPval sandbox tool server: `bash` and `python_exec` over loopback HTTP/JSON.

Standard library only and free of `gdpval` imports: this one file is copied into sandbox
images (as /opt/gdpval/toolserver.py) and bound into bubblewrap sandboxes, so it must run on
any Python 3.9+.

    python3 toolserver.py --listen 127.0.0.1:PORT | unix:/path.sock | fd:N --workspace DIR
                          [--max-output N] [--python PATH] [--token-file PATH] [--lifeline FD]

The bearer token comes from $GDPVAL_SANDBOX_TOKEN (removed from the environment before any
command runs, so commands do not see it casually) or from --token-file. `fd:N` serves an
already listening socket inherited from the launcher, which keeps the socket's path out of the
sandbox entirely.

Nothing a command does may stop the server: commands start with the highest OOM score (OomScore), in
their own memory cgroup when the launcher hands one over (--commands-cgroup, CommandsCgroup), under a
per-process data cap otherwise (--max-data-bytes); the server is not dumpable, so a command of the same uid cannot
open its memory, descriptors or OOM score; as PID 1 of its pid namespace (bubblewrap's --as-pid-1, or
a pod's container) the kernel ignores SIGKILL and SIGSTOP from commands, and the server ignores any
other signal they send; it reaps the orphans they leave. Requests are served by threads started
up front, so a command that exhausts the process limit does not leave the server unable to answer.
"""

# long: one file on purpose, copied alone into images and sandboxes and run by their python (stdlib only)
from __future__ import annotations

import argparse
import codecs
import ctypes
import hmac
import ipaddress
import json
import os
import queue
import selectors
import signal
import socket
import socketserver
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import IO, Any, Optional, Union, cast

TOKEN_ENV = "GDPVAL_SANDBOX_TOKEN"
DEFAULT_MAX_OUTPUT = 30000
DEFAULT_TIMEOUT = 180.0
MAX_TIMEOUT = 24 * 3600.0
MAX_BODY_BYTES = 16 * 1024 * 1024
KILL_GRACE_S = 1.0
DRAIN_AFTER_EXIT_S = 0.5
TIMEOUT_EXIT_CODE = 124
READ_CHUNK = 65536
OOM_SCORE_ADJ_MAX = b"1000"  # commands are the OOM killer's first choice, never the server
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
WORKERS = 8  # requests served at once
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
BLOCKED = {*STOP_SIGNALS, signal.SIGCHLD}  # taken by sigwaitinfo in one thread (_wait_for_stop)
REAP_EVERY_S = 1.0


class CappedOutput:
    """Keeps the head and tail of a byte stream as text, so a flood never fills memory."""

    def __init__(self, limit: int) -> None:
        self.tail_limit = limit // 2
        self.head_limit = limit - self.tail_limit
        self.head: list[str] = []
        self.head_len = 0
        self.tail = ""
        self.total = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        self.total += len(text)
        room = self.head_limit - self.head_len
        if room > 0 and text:
            piece = text[:room]
            self.head.append(piece)
            self.head_len += len(piece)
            text = text[room:]
        if text and self.tail_limit:
            self.tail = (self.tail + text)[-self.tail_limit :]

    def render(self) -> tuple[str, bool]:
        """The kept text, with a marker where characters were dropped."""
        self.feed(b"", final=True)
        omitted = self.total - self.head_len - len(self.tail)
        head = "".join(self.head)
        if omitted <= 0:
            return head + self.tail, False
        return f"{head}\n[... {omitted} characters omitted ...]\n{self.tail}", True


class ProcessRegistry:
    """Running command groups, so shutdown can kill what requests started."""

    def __init__(self, cgroup: Optional[CommandsCgroup] = None, oom_score: Optional[OomScore] = None) -> None:
        self.lock = threading.Lock()  # held while a command starts, so the reaper never takes one of ours
        self._procs: set[subprocess.Popen] = set()
        self.cgroup = cgroup
        self.oom_score = oom_score

    def start(self, argv: list[str], **popen: object) -> subprocess.Popen:
        """Start a command that inherits, from the starting thread, the stop signals unblocked and, from
        the server for that moment, the highest OOM score (no preexec_fn, which would make subprocess
        fork instead of vfork: 15 ms a call); move it into the commands' cgroup if it was not born there."""
        with self.lock:
            mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED)
            if self.oom_score is not None:
                self.oom_score.set(OOM_SCORE_ADJ_MAX)
            try:
                proc = subprocess.Popen(argv, **popen)  # type: ignore[call-overload]
            finally:
                if self.oom_score is not None:
                    self.oom_score.set(self.oom_score.own)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._procs.add(proc)
        if self.cgroup is not None:
            self.cgroup.move(proc.pid)
        return proc

    def reap_orphans(self) -> None:
        """Reap exited children that are not our commands: a PID 1 inherits every orphan of its
        namespace, and each zombie would count against the commands' process limit."""
        me = str(os.getpid()).encode()
        with self.lock:
            ours = {proc.pid for proc in self._procs}
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) not in ours and _zombie_child(entry, me):
                    try:
                        os.waitpid(int(entry), os.WNOHANG)
                    except ChildProcessError:
                        pass

    def discard(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self._procs.discard(proc)

    def kill_all(self) -> None:
        with self.lock:
            procs = list(self._procs)
        for proc in procs:
            kill_group(proc)


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in the group; orphans may wait to be reaped."""
    if os.path.isdir("/proc/self"):
        return any(_live_member(entry, pgid) for entry in os.listdir("/proc") if entry.isdigit())
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stat(pid: str) -> list[bytes]:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...); none when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _live_member(pid: str, pgid: int) -> bool:
    fields = _stat(pid)
    return len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X")


class OomScore:
    """The server's own oom_score_adj, opened before it became non-dumpable (which makes the file
    root's): raised to the highest while a command starts, so the command inherits it, then put back
    (an unprivileged process may lower its score down to the one it was started with)."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
        self.own = os.pread(self.fd, 16, 0).strip()

    def set(self, value: bytes) -> None:
        try:
            os.pwrite(self.fd, value, 0)
        except OSError:
            sys.stderr.write(f"toolserver: cannot set oom_score_adj to {value.decode()}\n")


class CommandsCgroup:
    """The commands' memory cgroup, from a descriptor the launcher opened (the server could not: it
    cannot see the cgroup file system). On cgroup v1 it is a `tasks` file: each worker thread joins it
    once, and the commands it forks are born there. On v2 (no per-thread memory cgroup) it is a
    `cgroup.procs`, and each command is moved after it starts."""

    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)
        self.fd = fd
        self.per_thread = os.readlink(f"/proc/self/fd/{fd}").endswith("/tasks")

    def join(self) -> None:
        if self.per_thread:
            os.write(self.fd, b"0")

    def move(self, pid: int) -> None:
        if not self.per_thread:
            try:
                os.write(self.fd, str(pid).encode())
            except ProcessLookupError:
                pass


def _zombie_child(pid: str, parent: bytes) -> bool:
    fields = _stat(pid)
    return len(fields) > 1 and fields[0] == b"Z" and fields[1] == parent


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(proc: subprocess.Popen) -> None:
    """TERM the command's whole process group, then KILL whatever outlives a short grace."""
    pgid = proc.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    while time.monotonic() < deadline:
        proc.poll()
        if not _group_alive(pgid):
            break
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _pump(proc: subprocess.Popen, out: CappedOutput, deadline: float, stdin_data: Optional[bytes]) -> bool:
    """Feed `stdin_data` and read combined output until EOF or the deadline; True when the deadline hit first.

    Once the main process has exited, background children that still hold the pipe get a
    short grace and are then no longer waited for. No thread is started: one might not be had.
    """
    fd = _stdout(proc).fileno()
    exited_at: Optional[float] = None
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        pending = memoryview(stdin_data or b"")
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        while True:
            now = time.monotonic()
            if now >= deadline:
                return True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= DRAIN_AFTER_EXIT_S:
                return False
            for key, _ in sel.select(min(deadline - now, 0.1)):
                if key.fd != fd:
                    pending = _feed(proc, pending, sel)
                    continue
                data = os.read(fd, READ_CHUNK)
                if not data:
                    return False
                out.feed(data)


def _feed(proc: subprocess.Popen, pending: memoryview, sel: selectors.BaseSelector) -> memoryview:
    """Write what the command's stdin takes now; close it once all is written or the command stopped reading."""
    stdin = cast(IO[bytes], proc.stdin)
    try:
        pending = pending[os.write(stdin.fileno(), pending[:READ_CHUNK]) :]
    except BlockingIOError:
        return pending
    except OSError:
        pending = pending[:0]
    if not pending:
        sel.unregister(stdin.fileno())
        stdin.close()
    return pending


def _drain(fd: int, out: CappedOutput) -> None:
    """Take what a killed group left in the pipe without blocking."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        for _ in range(64):
            if not sel.select(0):
                return
            data = os.read(fd, READ_CHUNK)
            if not data:
                return
            out.feed(data)


def _death(returncode: Optional[int]) -> str:
    """What the model is told when a signal ended its command: a SIGKILL nobody asked for is most
    often the OOM killer."""
    if returncode is None or returncode >= 0:
        return ""
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = ": out of memory?" if returncode == -signal.SIGKILL else ""
    return f"\n[killed by signal {-returncode} ({name}{hint})]\n"


def _exit_code(returncode: Optional[int]) -> int:
    if returncode is None:
        return TIMEOUT_EXIT_CODE
    return 128 - returncode if returncode < 0 else returncode


def run_command(
    argv: list[str],
    stdin_data: Optional[bytes],
    cwd: str,
    timeout: float,
    max_output: int,
    registry: ProcessRegistry,
) -> dict[str, object]:
    """Run one command in its own session; the result is the tool response body."""
    start = time.monotonic()
    try:
        proc = registry.start(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return _result(f"failed to start {argv[0]}: {exc}\n", 127, False, False, start)
    try:
        out = CappedOutput(max_output)
        timed_out = _pump(proc, out, start + timeout, stdin_data)
        if not timed_out:
            timed_out = _wait_until(proc, start + timeout)
        if timed_out:
            kill_group(proc)
            _drain(_stdout(proc).fileno(), out)
        text, truncated = out.render()
        code = TIMEOUT_EXIT_CODE if timed_out else _exit_code(proc.returncode)
        if timed_out:
            text += f"\n[command timed out after {timeout:g} s; its process group was killed]\n"
        else:
            text += _death(proc.returncode)
        return _result(text, code, timed_out, truncated, start)
    finally:
        registry.discard(proc)
        _stdout(proc).close()


def _stdout(proc: subprocess.Popen) -> IO[bytes]:
    """The pipe every command is started with (stdout=PIPE)."""
    assert proc.stdout is not None
    return proc.stdout


def _wait_until(proc: subprocess.Popen, deadline: float) -> bool:
    """Wait for a process that closed its output but still runs; True if the deadline hit."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return True
    return False


def _result(output: str, code: int, timed_out: bool, truncated: bool, start: float) -> dict[str, object]:
    return {
        "output": output,
        "exit_code": code,
        "timed_out": timed_out,
        "truncated": truncated,
        "duration_s": round(time.monotonic() - start, 3),
    }


class BadRequest(Exception):
    pass


def _timeout_of(body: dict) -> float:
    value = body.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest("'timeout' must be a number of seconds")
    if not 0 < value <= MAX_TIMEOUT:
        raise BadRequest(f"'timeout' must be > 0 and <= {MAX_TIMEOUT:g}")
    return float(value)


def _string_field(body: dict, name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadRequest(f"{name!r} must be a string")
    return value


class Tools:
    """The two tools, bound to one workspace and interpreter."""

    def __init__(self, workspace: str, python: str, max_output: int, cgroup: Optional[CommandsCgroup] = None, oom_score: Optional[OomScore] = None) -> None:
        self.workspace = workspace
        self.python = python
        self.max_output = max_output
        self.registry = ProcessRegistry(cgroup, oom_score)

    def run(self, tool: str, body: dict) -> dict[str, object]:
        timeout = _timeout_of(body)
        if tool == "bash":
            command = _string_field(body, "command")
            if "\x00" in command:
                raise BadRequest("'command' must not contain NUL characters")
            argv, stdin = ["bash", "-c", command], None
        else:
            argv, stdin = [self.python, "-u", "-"], _string_field(body, "code").encode("utf-8", "surrogatepass")
        return run_command(argv, stdin, self.workspace, timeout, self.max_output, self.registry)


TOOL_NAMES = ("bash", "python_exec")


class Handler(BaseHTTPRequestHandler):
    server_version = "gdpval-toolserver/1"

    def address_string(self) -> str:
        return self.client_address[0] if isinstance(self.client_address, tuple) else "unix"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"toolserver: {self.address_string()} {format % args}\n")

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        if not self._authorized():
            self._discard_body()
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        prefix = "/v1/tools/"
        tool = self.path[len(prefix) :] if self.path.startswith(prefix) else ""
        if tool not in TOOL_NAMES:
            self._discard_body()
            self._send(404, {"error": f"unknown tool path {self.path}; tools: {', '.join(TOOL_NAMES)}"})
            return
        try:
            result = self._state().tools.run(tool, self._read_json())
        except BadRequest as exc:
            self._send(400, {"error": str(exc)})
            return
        except Exception as exc:
            self.log_error("tool %s failed: %r", tool, exc)
            self._send(500, {"error": f"tool server error: {exc}"})
            return
        self._send(200, result)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(given.strip().encode(), self._state().token.encode())

    def _state(self) -> _ServerMixin:
        """Our servers carry the tools and the token (socketserver types `server` as its base class)."""
        return cast(_ServerMixin, self.server)

    def _discard_body(self) -> None:
        """Read an unwanted body so closing the socket does not reset the client's read."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)

    def _read_json(self) -> dict:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise BadRequest("a Content-Length header is required") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise BadRequest(f"body must be at most {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise BadRequest("body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        return body


class _ServerMixin:
    """Requests go to WORKERS threads started with the server (start_workers), never to a new thread
    per request: a command that exhausted the process limit would leave none to be had."""

    tools: Tools
    token: str
    _requests: queue.Queue[tuple[Any, Any]]

    def start_workers(self) -> None:
        self._requests = queue.Queue()
        for _ in range(WORKERS):
            threading.Thread(target=self._work, daemon=True).start()

    def process_request(self, request: Any, client_address: Any) -> None:
        self._requests.put((request, client_address))

    def _work(self) -> None:
        server = cast(socketserver.BaseServer, self)
        if self.tools.registry.cgroup is not None:
            self.tools.registry.cgroup.join()
        while True:
            request, client_address = self._requests.get()
            try:
                server.finish_request(request, client_address)
            except Exception:
                server.handle_error(request, client_address)
            finally:
                server.shutdown_request(request)


class TCPToolServer(_ServerMixin, HTTPServer):
    allow_reuse_address = True

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class TCPv6ToolServer(TCPToolServer):
    address_family = socket.AF_INET6


class UnixToolServer(_ServerMixin, socketserver.UnixStreamServer):
    pass


def _split_host_port(spec: str) -> tuple[str, int]:
    if spec.startswith("["):
        host, _, rest = spec[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = spec.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"toolserver: bad --listen {spec!r}; use 127.0.0.1:PORT or unix:/path")
    return host, int(port)


def _loopback_ip(host: str) -> str:
    """The numeric loopback address for `host`; anything else is refused."""
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"toolserver: --listen host {host!r} is not an IP address or localhost") from None
    if not ip.is_loopback:
        raise SystemExit(f"toolserver: refusing to listen on non-loopback address {host}")
    return str(ip)


def _unix_server(path: str) -> UnixToolServer:
    if os.path.exists(path):
        if not _is_socket(path):
            raise SystemExit(f"toolserver: {path} exists and is not a socket")
        os.unlink(path)
    old = os.umask(0o177)
    try:
        return UnixToolServer(path, Handler)
    finally:
        os.umask(old)


def _is_socket(path: str) -> bool:
    return stat.S_ISSOCK(os.lstat(path).st_mode)


ToolServer = Union[TCPToolServer, UnixToolServer]


def _inherited_server(fd: int) -> ToolServer:
    sock = socket.socket(fileno=fd)
    if sock.family == socket.AF_UNIX:
        server: ToolServer = UnixToolServer(sock.getsockname(), Handler, bind_and_activate=False)
    elif sock.family in (socket.AF_INET, socket.AF_INET6):
        _loopback_ip(sock.getsockname()[0])
        cls = TCPv6ToolServer if sock.family == socket.AF_INET6 else TCPToolServer
        server = cls(sock.getsockname()[:2], Handler, bind_and_activate=False)
    else:
        raise SystemExit(f"toolserver: inherited fd {fd} is not a unix or TCP socket")
    server.socket.close()
    server.socket = sock
    sock.listen(64)
    return server


def make_server(listen: str) -> tuple[ToolServer, str]:
    """A threaded server for a --listen spec, and the address clients should use."""
    if listen.startswith("unix:"):
        path = listen[len("unix:") :]
        return _unix_server(path), f"unix:{path}"
    if listen.startswith("fd:"):
        server = _inherited_server(int(listen[3:]))
        return server, _display_address(server)
    host, port = _split_host_port(listen)
    ip = _loopback_ip(host)
    cls = TCPv6ToolServer if ":" in ip else TCPToolServer
    server = cls((ip, port), Handler)
    return server, _display_address(server)


def _display_address(server: ToolServer) -> str:
    name = server.socket.getsockname()
    if server.socket.family == socket.AF_UNIX:
        return f"unix:{name}"
    host = f"[{name[0]}]" if server.socket.family == socket.AF_INET6 else name[0]
    return f"http://{host}:{name[1]}"


def _read_token(token_file: Optional[str]) -> str:
    token = os.environ.pop(TOKEN_ENV, "")
    if token_file:
        with open(token_file, encoding="utf-8") as fh:
            token = fh.read().strip()
    if not token:
        raise SystemExit(f"toolserver: no token; set ${TOKEN_ENV} or pass --token-file")
    return token


def _watch_lifeline(fd: int, stop: Callable[[], None]) -> None:
    """Stop serving once the launcher is gone, so a killed runner leaves no sandbox behind.

    The launcher holds the write end of a pipe and never writes: its death, however it dies, reads
    as end of file here. Unlike watching the parent pid this works as PID 1 of a pid namespace,
    where the parent is invisible and the kernel's parent-death signal may not be delivered.
    """
    while os.read(fd, 1):
        pass
    stop()


def _wait_for_stop(registry: ProcessRegistry, stop: Callable[[], None]) -> None:
    """Take the stop signals (blocked in every thread, see main) one by one, and stop on the first one
    that counts. As PID 1 of a pid namespace that is one sent from outside it (the kubelet, the
    launcher: the kernel shows them with sender pid 0); a command's is ignored. Otherwise any sender
    counts: one that can signal the server could kill it anyway. As PID 1, each SIGCHLD reaps orphans."""
    init = os.getpid() == 1
    while True:
        info = signal.sigtimedwait(BLOCKED, REAP_EVERY_S)  # a SIGCHLD may land in a thread starting a command
        if info is None or info.si_signo == signal.SIGCHLD:
            if init:
                registry.reap_orphans()
        elif not init or info.si_pid == 0:
            stop()
            return
        else:
            sys.stderr.write(f"toolserver: ignored {signal.Signals(info.si_signo).name} from pid {info.si_pid} (a command)\n")


def _own_oom_score() -> Optional[OomScore]:
    try:
        return OomScore()
    except OSError as exc:
        sys.stderr.write(f"toolserver: commands keep the server's OOM score ({exc})\n")
        return None


def _undumpable() -> None:
    """Make /proc/<pid>/mem, environ, fd and oom_score_adj of the server, and ptrace, refuse processes
    without capabilities, commands of the same uid included (the kernel resets this on exec)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        sys.stderr.write("toolserver: cannot make the server non-dumpable\n")


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GDPval sandbox tool server (bash, python_exec).")
    parser.add_argument("--listen", required=True, help="127.0.0.1:PORT, [::1]:PORT, unix:/path or fd:N")
    parser.add_argument("--workspace", required=True, help="working directory of every command")
    parser.add_argument("--max-output", type=int, default=DEFAULT_MAX_OUTPUT, help="characters kept per call")
    parser.add_argument("--python", default=sys.executable, help="interpreter for python_exec")
    parser.add_argument("--token-file", help=f"file holding the bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--lifeline", type=int, metavar="FD", help="exit when this pipe's writer (the launcher) is gone")
    parser.add_argument("--max-procs", type=int, metavar="N", help="RLIMIT_NPROC of every command (set it only inside a user namespace of its own)")
    parser.add_argument("--max-file-bytes", type=int, metavar="N", help="RLIMIT_FSIZE of every command: the largest file one may write")
    parser.add_argument("--max-data-bytes", type=int, metavar="N", help="RLIMIT_DATA of every command, where no cgroup caps their memory")
    parser.add_argument("--commands-cgroup", type=int, metavar="FD", help="a cgroup v1 tasks or v2 cgroup.procs, open for writing, that commands join")
    args = parser.parse_args(argv)
    if args.max_output < 100:
        parser.error("--max-output must be at least 100")
    return args


def _set_limits(max_procs: Optional[int], max_file_bytes: Optional[int], max_data_bytes: Optional[int]) -> None:
    """Hard limits that commands inherit and cannot raise again.

    In a user namespace of its own the kernel counts RLIMIT_NPROC over that namespace's tasks only,
    so it caps the sandbox's processes and threads whether the launcher is root or not. RLIMIT_DATA
    holds the server too, which stays far below any sandbox's memory.
    """
    import resource

    if max_procs is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_procs, max_procs))
    if max_file_bytes is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    if max_data_bytes is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (max_data_bytes, max_data_bytes))


def _ignore(signum: int, frame: object) -> None:
    """A stop signal that reached a thread while it started a command: its sender is unknown, so it does not count."""


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _ignore)
    signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED)  # before any thread, so all inherit it
    token = _read_token(args.token_file)
    oom_score = _own_oom_score()
    _undumpable()
    _set_limits(args.max_procs, args.max_file_bytes, args.max_data_bytes)
    cgroup = CommandsCgroup(args.commands_cgroup) if args.commands_cgroup is not None else None
    workspace = os.path.abspath(args.workspace)
    os.makedirs(os.path.join(workspace, "deliverable_files"), exist_ok=True)
    server, address = make_server(args.listen)
    tools = Tools(workspace, args.python, args.max_output, cgroup, oom_score)
    server.tools, server.token = tools, token
    server.start_workers()
    stop = threading.Thread(target=server.shutdown, daemon=True).start
    threading.Thread(target=_wait_for_stop, args=(tools.registry, stop), daemon=True).start()
    if args.lifeline is not None:
        threading.Thread(target=_watch_lifeline, args=(args.lifeline, stop), daemon=True).start()
    print(json.dumps({"listening": address}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        tools.registry.kill_all()
        server.server_close()
        if args.listen.startswith("unix:"):
            _unlink_quietly(address[len("unix:") :])
    return 0


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())

"""The sandbox tool server as a real subprocess, over loopback TCP and a unix socket."""

from __future__ import annotations

import ast
import http.client
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdpval.sandbox import toolserver
from gdpval.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable

SERVER = Path(toolserver.__file__)
TOKEN = "test-token-0123456789"
# Debian's own interpreter: what bubblewrap sandboxes and the sandbox images run the server with.
SYSTEM_PYTHON = "/usr/bin/python3"


class Server:
    def __init__(self, proc: subprocess.Popen, address: str, workspace: Path) -> None:
        self.proc, self.address, self.workspace = proc, address, workspace
        self.client = SandboxClient(address, TOKEN)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def _ready_line(proc: subprocess.Popen, timeout: float = 10.0) -> str:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError("tool server printed no ready line")
    return proc.stdout.readline().decode()


def start_server(workspace: Path, listen: str, *extra: str, python: str = sys.executable) -> Server:
    env = {"PATH": os.environ["PATH"], "GDPVAL_SANDBOX_TOKEN": TOKEN}
    argv = [python, str(SERVER), "--listen", listen, "--workspace", str(workspace), *extra]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = _ready_line(proc)
    return Server(proc, json.loads(line)["listening"], workspace)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("ws"), "127.0.0.1:0")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("ws"), "127.0.0.1:0", "--max-output", "1000")
    yield srv
    srv.stop()


def raw_post(address: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict]:
    host, port = address.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_healthz_needs_no_token(server: Server) -> None:
    assert server.address.startswith("http://127.0.0.1:")
    assert SandboxClient(server.address, "wrong").healthy()


def test_bash_output_exit_code_and_cwd(server: Server) -> None:
    out = server.client.call("bash", {"command": "pwd; echo hello; exit 3"}, timeout=10)
    assert out.output == f"{server.workspace}\nhello\n"
    assert (out.exit_code, out.timed_out, out.truncated) == (3, False, False)
    assert (server.workspace / "deliverable_files").is_dir()


def test_stdout_and_stderr_interleave_in_order(server: Server) -> None:
    cmd = "echo one; echo two >&2; echo three; echo four >&2"
    assert server.client.call("bash", {"command": cmd}, timeout=10).output == "one\ntwo\nthree\nfour\n"


def test_commands_get_no_stdin(server: Server) -> None:
    out = server.client.call("bash", {"command": "cat; echo after"}, timeout=10)
    assert out.output == "after\n" and not out.timed_out


def test_signal_death_maps_to_128_plus_signal(server: Server) -> None:
    assert server.client.call("bash", {"command": "kill -9 $$"}, timeout=10).exit_code == 137


def test_python_exec(server: Server) -> None:
    code = "import os, sys\nprint(os.getcwd())\nprint('err', file=sys.stderr)\nprint(input.__name__)\nsys.exit(5)"
    out = server.client.call("python_exec", {"code": code}, timeout=10)
    assert out.output == f"{server.workspace}\nerr\ninput\n"
    assert out.exit_code == 5


def test_python_exec_stdin_is_only_the_code(server: Server) -> None:
    code = "try:\n    input()\nexcept EOFError:\n    print('eof')"
    out = server.client.call("python_exec", {"code": code}, timeout=10)
    assert out.output == "eof\n"


def test_python_exec_traceback_and_unicode(server: Server) -> None:
    code = "print('héllo ✓ 日本')\nraise ValueError('boom')"
    out = server.client.call("python_exec", {"code": code}, timeout=10)
    assert out.output.startswith("héllo ✓ 日本\nTraceback")
    assert "ValueError: boom" in out.output and out.exit_code == 1


def test_timeout_kills_the_whole_process_group(server: Server) -> None:
    cmd = "sleep 100 & echo $! > bg.pid; sleep 100 & echo $! >> bg.pid; echo started; wait"
    start = time.monotonic()
    out = server.client.call("bash", {"command": cmd}, timeout=1)
    assert time.monotonic() - start < 60  # not the sleeps' 100 s; a loaded machine may add seconds
    assert out.timed_out and out.exit_code == 124
    assert out.output.startswith("started\n") and "timed out after 1 s" in out.output
    pids = [int(p) for p in (server.workspace / "bg.pid").read_text().split()]
    assert len(pids) == 2
    assert wait_dead(pids) == []


def test_background_output_holder_does_not_block(server: Server) -> None:
    out = server.client.call("bash", {"command": "sleep 600 & echo $! > holder.pid; echo done"}, timeout=300)
    assert out.output == "done\n" and out.exit_code == 0 and not out.timed_out
    holder = int((server.workspace / "holder.pid").read_text())
    os.kill(holder, 0)  # still sleeping: the call did not wait for the process holding its output
    os.kill(holder, signal.SIGKILL)


def test_output_cap_keeps_head_and_tail(small_server: Server) -> None:
    code = "import sys\nsys.stdout.write('H' * 600 + 'é' * 3000 + 'T' * 600)"
    out = small_server.client.call("python_exec", {"code": code}, timeout=10)
    assert out.truncated
    assert out.output == "H" * 500 + "\n[... 3200 characters omitted ...]\n" + "T" * 500


def test_output_flood_is_bounded_and_stops_at_timeout(small_server: Server) -> None:
    out = small_server.client.call("bash", {"command": "yes flood"}, timeout=1)
    assert out.timed_out and out.truncated
    assert len(out.output) < 1200 and out.output.startswith("flood\nflood\n")


def test_output_under_the_cap_is_untouched(small_server: Server) -> None:
    out = small_server.client.call("bash", {"command": "printf 'x%.0s' $(seq 1000)"}, timeout=10)
    assert out.output == "x" * 1000 and not out.truncated


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": TOKEN}])
def test_calls_need_the_right_token(server: Server, headers: dict[str, str]) -> None:
    body = json.dumps({"command": "touch pwned", "timeout": 5}).encode()
    status, payload = raw_post(server.address, "/v1/tools/bash", body, headers)
    assert status == 401 and "token" in payload["error"]
    assert not (server.workspace / "pwned").exists()


def test_client_reports_401_as_sandbox_error(server: Server) -> None:
    with pytest.raises(SandboxError) as err:
        SandboxClient(server.address, "wrong").call("bash", {"command": "true"}, timeout=5)
    assert err.value.status == 401


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"timeout": 5}',
        b'{"command": 7}',
        b'{"command": "true", "timeout": -1}',
        b'{"command": "true", "timeout": "soon"}',
        b'{"command": "a\\u0000b"}',
        b"\xff\xfe",
    ],
)
def test_bad_bodies_get_400(server: Server, body: bytes) -> None:
    status, payload = raw_post(server.address, "/v1/tools/bash", body, {"Authorization": f"Bearer {TOKEN}"})
    assert status == 400 and payload["error"]


def test_unknown_tool_gets_404(server: Server) -> None:
    with pytest.raises(SandboxError) as err:
        server.client.call("rm_rf", {"command": "true"}, timeout=5)
    assert err.value.status == 404


def test_body_size_limit(server: Server) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(toolserver.MAX_BODY_BYTES + 1)}
    host, port = server.address.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.putrequest("POST", "/v1/tools/bash")
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 400 and "at most" in json.loads(resp.read())["error"]
    conn.close()


def test_concurrent_calls_run_in_parallel(server: Server) -> None:
    """Each call waits until all three have started: calls run one at a time would never all get there."""
    exits: list[int] = []
    barrier = "touch arrived-$N; for _ in $(seq 600); do [ $(ls arrived-* | wc -l) = 3 ] && exit 0; sleep 0.1; done; exit 1"

    def call(n: int) -> None:
        exits.append(server.client.call("bash", {"command": f"N={n}; {barrier}"}, timeout=120).exit_code)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert exits == [0, 0, 0]


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "10.1.2.3:8080", "[::]:0", "example.com:80"])
def test_refuses_non_loopback_addresses(tmp_path: Path, listen: str) -> None:
    env = {"PATH": os.environ["PATH"], "GDPVAL_SANDBOX_TOKEN": TOKEN}
    argv = [sys.executable, str(SERVER), "--listen", listen, "--workspace", str(tmp_path)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0
    assert "non-loopback" in proc.stderr or "not an IP address" in proc.stderr


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    argv = [sys.executable, str(SERVER), "--listen", "127.0.0.1:0", "--workspace", str(tmp_path)]
    proc = subprocess.run(argv, env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0 and "token" in proc.stderr


def test_unix_socket_module_entry_point_and_hidden_token(tmp_path: Path) -> None:
    sock = tmp_path / "tool.sock"
    env = {"PATH": os.environ["PATH"], "GDPVAL_SANDBOX_TOKEN": TOKEN}
    module = [sys.executable, "-m", "gdpval.sandbox.toolserver"]
    argv = [*module, "--listen", f"unix:{sock}", "--workspace", str(tmp_path / "ws")]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    srv = Server(proc, json.loads(_ready_line(proc))["listening"], tmp_path / "ws")
    try:
        assert srv.address == f"unix:{sock}"
        assert sock.stat().st_mode & 0o077 == 0
        out = srv.client.call("bash", {"command": "pwd; env"}, timeout=10)
        assert out.output.startswith(f"{tmp_path / 'ws'}\n")
        assert TOKEN not in out.output and "GDPVAL_SANDBOX_TOKEN" not in out.output
    finally:
        srv.stop()
    assert not sock.exists()


def test_sigterm_kills_running_command_groups(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "127.0.0.1:0")
    cmd = "sleep 100 & echo $! > g.pid; setsid sleep 100 & echo $! > s.pid; wait"
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(_call_or_error(srv.client, cmd)))
    thread.start()
    deadline = time.monotonic() + 5
    while not (tmp_path / "s.pid").is_file() or not (tmp_path / "s.pid").read_text().strip():
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    in_group, escaped = (int((tmp_path / name).read_text()) for name in ("g.pid", "s.pid"))
    srv.proc.send_signal(signal.SIGTERM)
    srv.proc.wait(timeout=10)
    thread.join(timeout=10)
    assert isinstance(done[0], SandboxUnavailable)
    assert wait_dead([in_group]) == []
    assert alive(escaped), "a command that left its group with setsid is the launcher's to sweep"
    os.kill(escaped, signal.SIGKILL)


def _call_or_error(client: SandboxClient, command: str) -> object:
    try:
        return client.call("bash", {"command": command}, timeout=60)
    except (SandboxUnavailable, SandboxError) as exc:
        return exc


def test_client_unavailable_when_nothing_listens(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable):
        SandboxClient("http://127.0.0.1:9", TOKEN).call("bash", {"command": "true"}, timeout=1)
    with pytest.raises(SandboxUnavailable):
        SandboxClient(f"unix:{tmp_path / 'missing.sock'}", TOKEN).call("bash", {"command": "true"}, timeout=1)
    with pytest.raises(SandboxUnavailable):
        SandboxClient("http://127.0.0.1:9", TOKEN).wait_ready(0.2)


def test_stays_standard_library_and_python39_syntax() -> None:
    tree = ast.parse(SERVER.read_text(), feature_version=(3, 9))
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    assert modules - {"__future__"} <= sys.stdlib_module_names


def test_runs_on_the_system_python(tmp_path: Path) -> None:
    version = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True).stdout
    srv = start_server(tmp_path, "127.0.0.1:0", "--max-output", "200", python=SYSTEM_PYTHON)
    try:
        code = "import sys; print(sys.version_info[:2]); print('x' * 500)"
        out = srv.client.call("python_exec", {"code": code}, timeout=10)
        assert out.output.startswith(version) and out.truncated
        assert srv.client.call("bash", {"command": "sleep 5"}, timeout=0.5).timed_out
    finally:
        srv.stop()

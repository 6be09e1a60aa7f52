"""Local sandboxes with real processes: bubblewrap isolation and the unisolated fallback."""

from __future__ import annotations

import logging
import os
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdpval.runner.deliverables import collect
from gdpval.sandbox import LocalSandbox, SandboxClient, bwrap_status

HASH = "0f3a9c2e"
NAMES = ["Q3 Sales & Forecast (final).xlsx", "notes ü.txt"]
SECRETS = {"OPENAI_API_KEY": "sk-test-not-a-real-key", "AWS_SECRET_ACCESS_KEY": "aws-test-secret"}

needs_bwrap = pytest.mark.skipif(not bwrap_status()[0], reason=f"bubblewrap unusable: {bwrap_status()[1]}")


def bash(client: SandboxClient, command: str, timeout: float = 20) -> str:
    return client.call("bash", {"command": command}, timeout=timeout).output


def live_pids_with(needle: bytes) -> list[int]:
    """Host processes (not zombies) whose command line contains `needle`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


@pytest.fixture(scope="module")
def refs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cache = tmp_path_factory.mktemp("cache") / "reference_files" / HASH
    cache.mkdir(parents=True)
    references = {}
    for name in NAMES:
        (cache / name).write_text(f"content of {name}")
        references[f"reference_files/{HASH}/{name}"] = cache / name
    return references


@pytest.fixture(scope="module")
def secrets_in_env() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    for key, value in SECRETS.items():
        mp.setenv(key, value)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def boxed(tmp_path_factory: pytest.TempPathFactory, refs: dict[str, Path], secrets_in_env: None) -> Iterator[LocalSandbox]:
    if not bwrap_status()[0]:
        pytest.skip(f"bubblewrap unusable: {bwrap_status()[1]}")
    with LocalSandbox(tmp_path_factory.mktemp("ws"), refs, isolation="bwrap") as sandbox:
        yield sandbox


@needs_bwrap
def test_workspace_is_mounted_at_workspace(boxed: LocalSandbox) -> None:
    assert (boxed.isolated, boxed.workspace_path, boxed.reference_root) == (True, "/workspace", "/reference_files")
    client = boxed.client()
    out = bash(client, "pwd; ls -d deliverable_files; echo made > deliverable_files/out.txt")
    assert out == "/workspace\ndeliverable_files\n"
    assert (boxed.host_workspace / "deliverable_files" / "out.txt").read_text() == "made\n"
    code = "import os; print(os.getcwd()); print(os.path.realpath('/workspace'))"
    assert client.call("python_exec", {"code": code}, timeout=20).output == "/workspace\n/workspace\n"


@needs_bwrap
def test_references_readable_at_dataset_paths_and_read_only(boxed: LocalSandbox, refs: dict[str, Path]) -> None:
    client = boxed.client()
    for dataset_path, host in refs.items():
        inside = boxed.reference_path(dataset_path)
        assert inside == f"/{dataset_path}"
        quoted = shlex.quote(inside)
        assert bash(client, f"cat {quoted}") == host.read_text()
        out = client.call("bash", {"command": f"echo tamper >> {quoted}; rm -f {quoted}; ls {quoted}"}, timeout=20)
        assert "Read-only file system" in out.output
        assert host.read_text() == f"content of {host.name}"
    assert sorted(bash(client, f"ls /reference_files/{HASH}").splitlines()) == sorted(NAMES)


@needs_bwrap
def test_host_is_hidden_and_root_read_only(boxed: LocalSandbox) -> None:
    client = boxed.client()
    hidden = ["/work", "/root", "/home", str(boxed.workspace), str(Path(__file__).parent)]
    probes = [f"test -e {shlex.quote(p)} && echo VISIBLE {shlex.quote(p)}" for p in hidden]
    out = bash(client, " ; ".join(probes) + "; true")
    assert "VISIBLE" not in out
    assert "Read-only" in bash(client, "touch /etc/x /usr/x /x 2>&1; true")
    assert bash(client, "touch /tmp/x && echo tmp-ok") == "tmp-ok\n"
    assert bash(client, "which python3") == "/usr/bin/python3\n"
    assert str(os.getpid()) not in bash(client, "ls /proc").split()


@needs_bwrap
def test_environment_is_clean(boxed: LocalSandbox) -> None:
    env = bash(boxed.client(), "env")
    for key, value in SECRETS.items():
        assert key not in env and value not in env
    assert boxed.token not in env and "GDPVAL_SANDBOX_TOKEN" not in env
    names = {line.split("=", 1)[0] for line in env.splitlines() if "=" in line}
    assert {"PATH", "HOME", "LANG", "TMPDIR"} <= names


@needs_bwrap
def test_collect_refuses_a_symlink_made_inside(boxed: LocalSandbox) -> None:
    bash(boxed.client(), "ln -sf /etc/passwd deliverable_files/passwd; echo ok > deliverable_files/ok.txt")
    got = collect(boxed.host_workspace, max_file_bytes=1024, max_files=10)
    assert "passwd" in {r.path for r in got.refused}
    assert "ok.txt" in {f.relpath for f in got.files}


@pytest.fixture(scope="module")
def host_listener() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


CONNECT = """import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3)
    print("connected")
except OSError as exc:
    print("failed", exc)
"""


@needs_bwrap
def test_network_is_cut_when_off(boxed: LocalSandbox, host_listener: int) -> None:
    out = boxed.client().call("python_exec", {"code": CONNECT.format(port=host_listener)}, timeout=20).output
    assert out.startswith("failed")


@needs_bwrap
def test_network_on_leaves_the_hosts_loopback_out(tmp_path: Path, host_listener: int) -> None:
    """The sandbox's own 127.0.0.1 answers (nothing listens there), not the host's; a route out exists."""
    with LocalSandbox(tmp_path, {}, isolation="bwrap", network=True) as sandbox:
        out = sandbox.client().call("python_exec", {"code": CONNECT.format(port=host_listener)}, timeout=20).output
        routes = bash(sandbox.client(), "cat /proc/net/route")
    assert out.startswith("failed [Errno 111]"), out
    assert any(line.split()[1] == "00000000" for line in routes.splitlines()[1:]), routes


ESCAPE = "sleep {0}1 & setsid sleep {0}2 >/dev/null 2>&1 & nohup sleep {0}3 >/dev/null 2>&1 & echo started"


def assert_nothing_left(sandbox_pid: int, tag: str) -> None:
    deadline = time.monotonic() + 5
    while live_pids_with(f"sleep {tag}".encode()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live_pids_with(f"sleep {tag}".encode()) == []
    assert not Path(f"/proc/{sandbox_pid}").exists() or "Z" in Path(f"/proc/{sandbox_pid}/stat").read_text()


@needs_bwrap
def test_nothing_survives_the_sandbox(tmp_path: Path) -> None:
    tag = f"{os.getpid() % 1000}.{time.monotonic_ns() % 1000}"
    with LocalSandbox(tmp_path, {}, isolation="bwrap") as sandbox:
        pid = sandbox.pid
        assert bash(sandbox.client(), ESCAPE.format(tag)) == "started\n"
        assert len(live_pids_with(f"sleep {tag}".encode())) == 3
    assert_nothing_left(pid, tag)


@needs_bwrap
def test_two_threads_stopping_one_sandbox_both_return_and_nothing_is_left(tmp_path: Path) -> None:
    """A runner's Ctrl-C stops every live sandbox while each sample's thread stops its own: in CI the
    two raced on one process and cgroup and the runner never exited."""
    tag = f"{os.getpid() % 1000}.{time.monotonic_ns() % 1000}"
    sandbox = LocalSandbox(tmp_path, {})
    sandbox.start()
    pid = sandbox.pid
    assert bash(sandbox.client(), ESCAPE.format(tag)) == "started\n"
    both = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def stop() -> None:
        both.wait()
        try:
            sandbox.stop()
        except BaseException as exc:
            errors.append(exc)

    stoppers = [threading.Thread(target=stop) for _ in range(2)]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join(120)
    assert not any(t.is_alive() for t in stoppers), "a stop never returned"
    assert errors == []
    assert_nothing_left(pid, tag)


@needs_bwrap
def test_survives_the_thread_that_started_it(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path, {}, isolation="bwrap")
    starter = threading.Thread(target=sandbox.start)
    starter.start()
    starter.join()
    try:
        time.sleep(0.3)
        assert bash(sandbox.client(), "echo alive") == "alive\n"
    finally:
        sandbox.stop()


def test_missing_reference_fails_before_start(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="reference_files/abc/gone.pdf"):
        LocalSandbox(tmp_path, {"reference_files/abc/gone.pdf": tmp_path / "gone.pdf"})
    with pytest.raises(ValueError):
        LocalSandbox(tmp_path, {"../etc/passwd": Path("/etc/passwd")})


def test_unisolated_mode_warns_and_uses_real_paths(tmp_path: Path, refs: dict[str, Path], secrets_in_env: None, caplog: pytest.LogCaptureFixture) -> None:
    tag = f"{os.getpid() % 1000}.{time.monotonic_ns() % 1000 + 1}"
    caplog.set_level(logging.WARNING, logger="gdpval.sandbox.local")
    with LocalSandbox(tmp_path / "ws", refs, isolation="none") as sandbox:
        assert not sandbox.isolated and "NOT isolated" in caplog.text
        assert sandbox.workspace_path == str(tmp_path / "ws")
        assert sandbox.reference_root == str(next(iter(refs.values())).parent.parent)
        client = sandbox.client()
        assert bash(client, "pwd") == f"{tmp_path / 'ws'}\n"
        for dataset_path, host in refs.items():
            assert sandbox.reference_path(dataset_path) == str(host)
            assert bash(client, f"cat {shlex.quote(str(host))}") == host.read_text()
        env = bash(client, "env")
        assert all(key not in env for key in SECRETS) and sandbox.token not in env
        pid = sandbox.pid
        assert bash(client, ESCAPE.format(tag)) == "started\n"
        assert len(live_pids_with(f"sleep {tag}".encode())) == 3
    assert_nothing_left(pid, tag)

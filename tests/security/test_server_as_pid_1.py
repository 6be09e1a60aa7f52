"""The tool server as a sample pod's sandbox container runs it: PID 1 of its own pid namespace, on loopback
TCP, beside processes of its uid (the model's commands). Made here with unshare and setpriv as root;
tests/cluster/test_sample_pod_toolserver.py does the same attack in a real sample pod."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gdpval.sandbox.client import SandboxClient
from gdpval.sandbox.files import TOOLSERVER
from support.attacks import server_attack
from support.processes import free_port

UID = 1000  # the sandbox container's
AS_UID = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups"]
PYTHON = "/usr/bin/python3"


@pytest.fixture
def folder() -> Iterator[Path]:
    """Readable by uid 1000, which cannot walk pytest's own folders."""
    path = Path(tempfile.mkdtemp(prefix="gdpval-pid1-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Pid1Server:
    pid: int
    port: int
    client: SandboxClient
    path: Path


@pytest.fixture
def pid1_server(folder: Path) -> Iterator[Pid1Server]:
    """The tool server (this tree's) as uid 1000 and PID 1 of a new pid namespace, on loopback TCP."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a pid namespace and uid 1000")
    token, port = secrets.token_urlsafe(16), free_port()
    (folder / "token").write_text(token)
    (folder / "workspace").mkdir()
    (folder / "workspace").chmod(0o777)
    shutil.copy(TOOLSERVER, folder / "toolserver.py")
    argv = ["unshare", "--pid", "--fork", "--mount-proc", *AS_UID, PYTHON, str(folder / "toolserver.py"), "--listen", f"127.0.0.1:{port}"]
    argv += ["--workspace", str(folder / "workspace"), "--token-file", str(folder / "token")]
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert launcher.stdout is not None and "listening" in launcher.stdout.readline().decode()
        (pid,) = (int(p) for p in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split())
        yield Pid1Server(pid, port, SandboxClient(f"http://127.0.0.1:{port}", token), folder / "toolserver.py")
        os.kill(pid, signal.SIGTERM)  # from outside its namespace, as the kubelet's: it stops
        assert launcher.wait(timeout=20) == 0
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def test_a_process_of_its_uid_cannot_stop_read_or_replace_the_server_as_pid_1(pid1_server: Pid1Server) -> None:
    attack = ["nsenter", "-t", str(pid1_server.pid), "-p", "-m", *AS_UID, PYTHON, "-c", server_attack("127.0.0.1", pid1_server.port)]
    done = subprocess.run(attack, capture_output=True, text=True, timeout=60)
    assert done.stdout, f"the attack died with its namespace's PID 1, the server (exit {done.returncode})"
    seen = json.loads(done.stdout)
    assert seen == {"mem": "Permission denied", "server": str(pid1_server.path), "127.0.0.1": "Address already in use", "0.0.0.0": "Address already in use"}
    assert pid1_server.client.call("bash", {"command": "echo alive", "timeout": 10}, 20).output == "alive\n"


ORPHANS = "for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 3; ps -eo stat= | grep -c '^Z'"


def test_the_server_as_pid_1_reaps_the_orphans_of_its_commands(pid1_server: Pid1Server) -> None:
    """Orphans are reparented to PID 1; unreaped, each zombie would count against the commands' process limit."""
    out = pid1_server.client.call("bash", {"command": ORPHANS, "timeout": 20}, 30).output
    assert out == "0\n", out

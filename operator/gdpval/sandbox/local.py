"""One sandbox per sample on this machine: the tool server under bubblewrap, or a plain process.

Under bubblewrap the model sees the same paths as in a pod (`/workspace`,
`/reference_files/<hash>/<name>`) in a private mount and pid namespace with an empty,
read-only root holding only the system folders of its runtime (gdpval.sandbox.runtime): the host's
/usr and /etc, or those of the unpacked sandbox image pods run. Without it the tool server is a plain process, the model is told the real
host paths, and a warning says that nothing is isolated.

The tool server always listens on a unix socket that this process creates in a private
(0700) host folder and hands over as an inherited descriptor (`--listen fd:N`): it works with
the network namespace cut, no port has to be picked, other sandboxes cannot reach it, and the
socket has no path inside the sandbox for the model to delete.

bubblewrap's --die-with-parent fires when the *thread* that forked it exits, so every server is
forked by one spawner thread that lives as long as the process: sandboxes can be started from
short-lived threads and still die with the runner.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Literal

from gdpval import contract
from gdpval.sandbox import seccomp
from gdpval.sandbox.client import SandboxClient, SandboxUnavailable
from gdpval.sandbox.limits import IMAGE_FILE, RUNTIME_PREFIX, Limits, LoopDisk, SampleCgroup, cgroup_support, loop_disk_support
from gdpval.sandbox.limits import PREFIX as CGROUP_PREFIX
from gdpval.sandbox.runtime import Runtime, root_binds

Isolation = Literal["auto", "bwrap", "none"]

log = logging.getLogger(__name__)

BWRAP = "/usr/bin/bwrap"
TOOLSERVER = Path(__file__).with_name("toolserver.py")
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER_ENV = "GDPVAL_SANDBOX_ID"
READY_TIMEOUT_S = 20.0
STOP_GRACE_S = 3.0
SANDBOX_UID = 1000  # who commands run as inside; files they write belong to the runner's uid on the host


def _namespace_args(network: bool, seccomp_fd: int | None, tmp_bytes: int | None, system: Runtime) -> list[str]:
    """Namespaces and privileges: a user namespace whose one uid maps to the runner's, so the
    sandbox holds no capability on the host even when the runner is root; no capability inside it
    either, no further user namespaces, the seccomp filter read from `seccomp_fd`, and a /tmp of
    `tmp_bytes`. Without a filter (benchmarks only) none of that hardening is applied. The system
    folders come read-only from `system` (the host's, or an unpacked image's)."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--die-with-parent"]
    if seccomp_fd is not None:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--cap-drop", "ALL"]
        args += ["--unshare-cgroup", "--seccomp", str(seccomp_fd)]
    if not network:
        args.append("--unshare-net")
    size = ["--size", str(tmp_bytes)] if tmp_bytes is not None else []
    return args + root_binds(system) + ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/tmp"]


def _pipe_holding(data: bytes) -> int:
    """A pipe's read end holding `data` then end of file (a few hundred bytes: within a pipe's buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


@functools.cache
def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap really works here (a trial sandbox runs `true`), and why not."""
    if not os.access(BWRAP, os.X_OK):
        return False, f"{BWRAP} not found (Debian package: bubblewrap)"
    try:
        filter_fd = _pipe_holding(seccomp.build())
    except ValueError as exc:
        return False, str(exc)
    argv = [BWRAP, *_namespace_args(False, filter_fd, Limits.of().memory_bytes, Runtime()), "--remount-ro", "/", "--", "/usr/bin/true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=15, env={"PATH": CLEAN_PATH}, pass_fds=(filter_fd,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"trial bubblewrap sandbox failed: {exc}"
    finally:
        os.close(filter_fd)
    if proc.returncode != 0:
        return False, f"trial bubblewrap sandbox failed: {proc.stderr.strip() or proc.returncode}"
    return True, "bubblewrap works"


def _check_dataset_path(dataset_path: str) -> None:
    parts = dataset_path.split("/")
    if len(parts) < 3 or parts[0] != "reference_files" or "\x00" in dataset_path or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"reference path {dataset_path!r} is not reference_files/<hash>/<name>")


def _checked_references(references: dict[str, Path]) -> dict[str, Path]:
    """Fail before starting if a reference file is missing: never a silent skip."""
    checked: dict[str, Path] = {}
    for dataset_path, host in references.items():
        _check_dataset_path(dataset_path)
        host = Path(host).absolute()
        if not host.is_file():
            raise FileNotFoundError(f"reference file {dataset_path} is missing (expected at {host})")
        checked[dataset_path] = host
    return checked


@functools.cache
def _spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that forks sandboxes (see the module docstring)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="gdpval-sandbox-spawner")


def _marked_pids(marker: bytes) -> list[int]:
    """Host pids whose environment carries this sandbox's marker."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def _kill_marked(marker: bytes) -> None:
    """Kill leftovers that left our process group (new sessions) but kept the marker."""
    deadline = time.monotonic() + STOP_GRACE_S
    while (pids := _marked_pids(marker)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class LocalSandbox:
    """A tool server for one sample, started on `__enter__` and gone (with all it ran) on exit."""

    def __init__(
        self,
        workspace: Path,
        references: dict[str, Path],
        *,
        network: bool = False,
        isolation: Isolation = "auto",
        python: str | None = None,
        limits: Limits | None = None,
        harden: bool = True,
        system: Runtime | None = None,
    ) -> None:
        """`system` is the root the sandbox runs in (default: the host's); `harden=False` leaves out the
        user namespace, seccomp and limits: only to measure their cost."""
        self.workspace = Path(workspace).absolute()
        self.system = system or Runtime()
        self.limits = limits or Limits.of()
        self.harden = harden
        self.references = _checked_references(references)
        self.network = network
        self.isolated, self._isolation_note = self._choose_isolation(isolation)
        self.python = self._choose_python(python)
        self.token = secrets.token_urlsafe(32)
        self._id = secrets.token_hex(12)
        self._runtime: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._lifeline: int | None = None  # write end of the pipe whose closing stops the server
        self._cgroup: SampleCgroup | None = None
        self._disk: LoopDisk | None = None

    @staticmethod
    def _choose_isolation(isolation: Isolation) -> tuple[bool, str]:
        """Whether to use bubblewrap, and why not when not."""
        if isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolation must be auto, bwrap or none, not {isolation!r}")
        if isolation == "none":
            return False, "isolation='none' requested"
        works, reason = bwrap_status()
        if not works and isolation == "bwrap":
            raise SandboxUnavailable(f"bubblewrap isolation requested but not usable: {reason}")
        return works, reason

    def _choose_python(self, python: str | None) -> str:
        if not self.isolated:
            if self.system.root is not None:
                raise SandboxUnavailable(f"the runtime {self.system.label} needs bubblewrap isolation ({self._isolation_note})")
            return python or shutil.which("python3", path=CLEAN_PATH) or sys.executable
        python = python or self.system.python
        if self.system.root is None and not python.startswith(("/usr/", "/bin/")):
            raise ValueError(f"python {python!r} is not visible inside the sandbox: use one under /usr")
        return python

    @property
    def address(self) -> str:
        return f"unix:{self.runtime / 'tool.sock'}"

    @property
    def workspace_path(self) -> str:
        """The workspace as the model sees it."""
        return contract.WORKSPACE if self.isolated else str(self.workspace)

    @property
    def reference_root(self) -> str:
        """The reference folder as the model sees it; without isolation, the references'
        common host folder ("" when there are none)."""
        if self.isolated:
            return contract.REFERENCES
        if not self.references:
            return ""
        return os.path.commonpath([str(host.parent.parent) for host in self.references.values()])

    def reference_path(self, dataset_path: str) -> str:
        """Where the model finds the reference `reference_files/<hash>/<name>`."""
        if dataset_path not in self.references:
            raise KeyError(f"{dataset_path} is not a reference of this sandbox")
        return f"/{dataset_path}" if self.isolated else str(self.references[dataset_path])

    @property
    def pid(self) -> int | None:
        """Host pid of the server process (bubblewrap when isolated); None when stopped."""
        return self._proc.pid if self._proc is not None else None

    def client(self) -> SandboxClient:
        return SandboxClient(self.address, self.token)

    def __enter__(self) -> LocalSandbox:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def runtime(self) -> Path:
        """The sandbox's private folder (socket, log, scratch), which exists from start() on."""
        if self._runtime is None:
            raise SandboxUnavailable("the sandbox has not been started")
        return self._runtime

    def _env(self) -> dict[str, str]:
        """The whole environment of the server and its commands: nothing of the host's; over an image's
        root, the image's own variables (its PATH with the venv first, cache folders) as in a pod."""
        tmp = "/tmp" if self.isolated else str(self.runtime / "tmp")
        return {
            "PATH": CLEAN_PATH,
            **self.system.env,
            "HOME": tmp,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "TERM": "dumb",
            "PAGER": "cat",
            MARKER_ENV: self._id,
        }

    def _bwrap_argv(self, fds: dict[str, int]) -> list[str]:
        tmp_bytes = self.limits.memory_bytes if self.harden else None
        args = [BWRAP, *_namespace_args(self.network, fds.get("seccomp"), tmp_bytes, self.system)]
        args += ["--bind", str(self.workspace), contract.WORKSPACE, "--dir", contract.REFERENCES]
        for dataset_path, host in sorted(self.references.items()):
            args += ["--ro-bind", str(host), f"/{dataset_path}"]
        args += ["--ro-bind", str(TOOLSERVER), contract.TOOLSERVER, "--remount-ro", "/", "--chdir", contract.WORKSPACE]
        argv = [*args, "--", self.python, contract.TOOLSERVER, *self._server_args(fds, contract.WORKSPACE)]
        if not self.harden:
            return argv
        argv += ["--max-procs", str(self.limits.pids), "--max-file-bytes", str(self.limits.disk_bytes)]
        if self._cgroup is None:
            return argv
        joins = " && ".join(f"echo $$ > {shlex.quote(path)}" for path in self._cgroup.procs_files)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def _plain_argv(self, fds: dict[str, int]) -> list[str]:
        return [self.python, str(TOOLSERVER), *self._server_args(fds, str(self.workspace))]

    def _server_args(self, fds: dict[str, int], workspace: str) -> list[str]:
        return [
            "--listen",
            f"fd:{fds['listen']}",
            "--workspace",
            workspace,
            "--python",
            self.python,
            "--lifeline",
            str(fds["lifeline"]),
            "--token-file",
            f"/proc/self/fd/{fds['token']}",
        ]

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("sandbox already started")
        if not self.isolated:
            log.warning(
                "sandbox for %s is NOT isolated (%s): commands run on the host as this user with "
                "its real paths, references are writable and the network is not cut",
                self.workspace,
                self._isolation_note,
            )
        self.workspace.mkdir(parents=True, exist_ok=True)
        self._runtime = Path(tempfile.mkdtemp(prefix=RUNTIME_PREFIX, dir=_socket_base()))
        (self._runtime / "tmp").mkdir()
        try:
            if self.isolated and self.harden:
                self._enforce_limits()
            self._spawn()
            self.client().wait_ready(READY_TIMEOUT_S)
        except BaseException as exc:
            detail = self._server_log()
            self.stop()
            if isinstance(exc, SandboxUnavailable):
                raise SandboxUnavailable(f"sandbox did not start: {exc}; server said: {detail}") from None
            raise

    def _enforce_limits(self) -> None:
        """The sample's cgroup and disk where this machine allows them (see gdpval.sandbox.limits)."""
        name = f"{CGROUP_PREFIX}{self._id}"
        if not cgroup_support(self.limits.cpus is not None):
            self._cgroup = SampleCgroup(name, self.limits)
        if not loop_disk_support():
            self._disk = LoopDisk(self.runtime / IMAGE_FILE, self.workspace, self.limits.disk_bytes)

    def _spawn(self) -> None:
        """Start the server with its listening socket, the read end of a lifeline pipe, and pipes
        holding the token and (isolated) the seccomp filter.

        Only this process holds the lifeline's write end (non-inheritable), so however it dies, the
        server reads end of file and exits, even as PID 1 of bubblewrap's pid namespace. The token
        travels in a pipe the server drains, not in the environment, which every process of the
        same uid could read in /proc/<pid>/environ.
        """
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lifeline, self._lifeline = os.pipe()
        fds = {"listen": listener.fileno(), "lifeline": lifeline, "token": _pipe_holding(self.token.encode())}
        if self.isolated and self.harden:
            fds["seccomp"] = _pipe_holding(seccomp.build())
        try:
            listener.bind(str(self.runtime / "tool.sock"))
            listener.listen(64)
            argv = self._bwrap_argv(fds) if self.isolated else self._plain_argv(fds)
            with open(self.runtime / "toolserver.log", "wb") as server_log:
                popen = functools.partial(
                    subprocess.Popen,
                    argv,
                    env=self._env(),
                    cwd=self.workspace,
                    pass_fds=tuple(fds.values()),
                    stdin=subprocess.DEVNULL,
                    stdout=server_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                self._proc = _spawner().submit(popen).result()
        finally:
            listener.close()
            for name, fd in fds.items():
                if name != "listen":
                    os.close(fd)

    def _server_log(self) -> str:
        try:
            return (self.runtime / "toolserver.log").read_text(errors="replace").strip()[-2000:] or "(nothing)"
        except (OSError, TypeError):
            return "(no log)"

    def stop(self) -> None:
        """End the server and every process it started; remove the private folder."""
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self._proc is not None:
            pgid = self._proc.pid
            _signal_group(pgid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(pgid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None
        _kill_marked(f"{MARKER_ENV}={self._id}".encode())
        if self._cgroup is not None:
            self._cgroup.kill()
            self._cgroup.remove()
            self._cgroup = None
        if self._disk is not None:
            self._disk.remove()
            self._disk = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = None


def _socket_base() -> str:
    """Where the private socket folder goes: a unix socket path must fit in 108 bytes, so a long
    TMPDIR (pytest's, say) falls back to /tmp."""
    base = tempfile.gettempdir()
    return base if len(base) <= 48 else "/tmp"

"""One sandbox per sample on this machine: the tool server under bubblewrap, or a plain process.

Under bubblewrap the model sees the same paths as in a pod (`/workspace`,
`/reference_files/<hash>/<name>`) in a private mount and pid namespace with an empty,
read-only root holding only the system folders of its runtime (gdpval.sandbox.runtime): the host's
/usr and /etc, or those of the unpacked sandbox image pods run. Without it the tool server is a plain process, the model is told the real
host paths, and a warning says that nothing is isolated.

The workspace is the runner's work folder bound on `/workspace` (as root, a loop-mounted disk of the cap:
see gdpval.sandbox.limits); a non-root runner's is a size-capped tmpfs bubblewrap mounts in the sandbox's
own mount namespace, and this process reads it through a descriptor opened via
the server's root (`host_workspace`), which keeps it until the sandbox stops.

The tool server always listens on a unix socket that this process creates in a private
(0700) host folder and hands over as an inherited descriptor (`--listen fd:N`): it works with
the network namespace cut, no port has to be picked, other sandboxes cannot reach it, and the
socket has no path inside the sandbox for the model to delete.

A root runner's sandboxes drop to an unprivileged uid and reach their folders through a view, and
with the network on they get pasta's user-mode NAT (gdpval.sandbox.launch, gdpval.sandbox.view); files
(references, the tool server) are copied in from descriptors this process opened, not bound
(gdpval.sandbox.files); the sample's cgroup and disk are held from start to stop
(gdpval.sandbox.limits.held); its processes are found and killed by a marker (gdpval.sandbox.process).
"""

from __future__ import annotations

import functools
import json
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
import threading
from pathlib import Path
from types import TracebackType
from typing import Literal

from gdpval import contract
from gdpval.sandbox import seccomp
from gdpval.sandbox.client import SandboxClient, SandboxUnavailable
from gdpval.sandbox.files import STAGED_FD, TOOLSERVER, checked_references, staged
from gdpval.sandbox.launch import BWRAP, CLEAN_PATH, bwrap_status, dropping, namespace_args, network_status, networked, pipe_holding, sandbox_owner
from gdpval.sandbox.limits import IMAGE_FILE, RUNTIME_PREFIX, Limits
from gdpval.sandbox.limits import PREFIX as CGROUP_PREFIX
from gdpval.sandbox.limits.disk import memory_workspace
from gdpval.sandbox.limits.held import HeldLimits
from gdpval.sandbox.process import MARKER_ENV, STOP_GRACE_S, kill_marked, server_pid, signal_group
from gdpval.sandbox.runtime import Runtime
from gdpval.sandbox.view import View, spawn_in_view, spawner

Isolation = Literal["auto", "bwrap", "none"]

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 20.0


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
        self.references = checked_references(references)
        self.network = network
        self.isolated, self._isolation_note = self._choose_isolation(isolation)
        if self.isolated and network and not harden and os.geteuid() == 0:
            raise ValueError("harden=False with the network runs pasta as root, which it refuses: measure the network hardened")
        if self.isolated and network and not (status := network_status())[0]:
            raise SandboxUnavailable(f"the network was asked for, but not in a namespace of the sandbox's own: {status[1]}")
        self.python = self._choose_python(python)
        self.token = secrets.token_urlsafe(32)
        self._id = secrets.token_hex(12)
        self._runtime: Path | None = None
        self._proc: subprocess.Popen | None = None
        self._lifeline: int | None = None  # write end of the pipe whose closing stops the server
        self._held: HeldLimits | None = None  # the sample's cgroup and disk
        self.sizes = self.limits.filesystems(workspace_in_memory=self.isolated and self.harden and memory_workspace())
        self._info: int | None = None  # read end of bubblewrap's --info-fd, which names the server's host pid
        self._workspace_fd: int | None = None  # the in-memory workspace, opened through the server's root
        self.owner = sandbox_owner() if self.isolated and self.harden else None
        self._view: View | None = None  # where bubblewrap finds its sources when dropping privileges
        self._stopping = threading.Lock()  # a runner's Ctrl-C and the sample's own thread may stop it at once

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

    def _source(self, host: Path, name: str) -> str:
        """Where bubblewrap finds `host`: in the view when privileges are dropped (see gdpval.sandbox.view), else itself."""
        if self.owner is None:
            return str(host)
        if self._view is None:
            raise SandboxUnavailable("the sandbox's view has not been prepared")
        return str(self._view.place(name))

    def _bwrap_argv(self, fds: dict[str, int]) -> list[str]:
        root = self._source(self.system.root, "root") if self.system.root is not None else None
        args = [BWRAP, *namespace_args(self.network, fds.get("seccomp"), self.sizes if self.harden else None, self.system, root)]
        if self.sizes.workspace is None:
            args += ["--bind", self._source(self.workspace, "workspace"), contract.WORKSPACE]
        else:
            args += ["--info-fd", str(fds["info"]), "--size", str(self.sizes.workspace), "--tmpfs", contract.WORKSPACE]
        args += ["--dir", contract.REFERENCES]
        for index, place in enumerate(staged(self.references)):
            args += ["--perms", "0444", "--ro-bind-data", str(fds[f"{STAGED_FD}{index}"]), place]
        args += ["--remount-ro", "/", "--chdir", contract.WORKSPACE]
        argv = [*args, "--", self.python, contract.TOOLSERVER, *self._server_args(fds, contract.WORKSPACE)]
        if self.harden:
            argv += ["--max-procs", str(self.limits.pids), "--max-file-bytes", str(self.limits.disk_bytes), *self._memory_args(fds)]
        if self.network:
            argv = networked(argv)
        if not self.harden:
            return argv
        argv = dropping(argv, self.owner)
        cgroup = self._held.cgroup if self._held is not None else None
        if cgroup is None:
            return argv
        joins = " && ".join(f"echo $$ > {shlex.quote(path)}" for path in cgroup.procs_files)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def _memory_args(self, fds: dict[str, int]) -> list[str]:
        """The commands' memory cap: their own cgroup where the sample has one, else a per-process RLIMIT_DATA."""
        if "commands-cgroup" in fds:
            return ["--commands-cgroup", str(fds["commands-cgroup"])]
        return ["--max-data-bytes", str(self.limits.memory_bytes)]

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
            if self.owner is not None:
                self._view = View(self.workspace, self.system.root, self.owner)
            self._spawn()
            self.client().wait_ready(READY_TIMEOUT_S)
            if self._info is not None:
                self._open_workspace()
        except BaseException as exc:
            detail = self._server_log()
            self.stop()
            if isinstance(exc, SandboxUnavailable):
                raise SandboxUnavailable(f"sandbox did not start: {exc}; server said: {detail}") from None
            raise

    def _enforce_limits(self) -> None:
        """The sample's cgroup and disk where this machine allows them (see gdpval.sandbox.limits)."""
        self._held = HeldLimits(f"{CGROUP_PREFIX}{self._id}", self.limits, self.runtime / IMAGE_FILE, self.workspace)

    @property
    def host_workspace(self) -> Path:
        """Where this process reads the workspace (deliverables): the host folder, or for an in-memory
        workspace, the descriptor of the server's /workspace, valid until stop()."""
        if self._workspace_fd is not None:
            return Path(f"/proc/self/fd/{self._workspace_fd}")
        return self.workspace

    def _open_workspace(self) -> None:
        """Open the in-memory workspace through the root of the server (see server_pid), once it answers and
        before any command ran. The descriptor keeps the tmpfs while it is held."""
        assert self._info is not None and self._proc is not None
        with os.fdopen(self._info, "rb") as info:
            self._info = None
            child = int(json.loads(info.read1(4096))["child-pid"])  # one small write to a pipe: whole or not at all
        pid = server_pid(f"{MARKER_ENV}={self._id}".encode(), child)
        self._workspace_fd = os.open(f"/proc/{pid}/root{contract.WORKSPACE}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        if self._proc.poll() is not None:  # the server had ended, so its pid might have been another's by then
            raise SandboxUnavailable("the tool server ended before its workspace was opened")

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
        fds = {"listen": listener.fileno(), "lifeline": lifeline, "token": pipe_holding(self.token.encode())}
        if self.owner is not None:
            os.fchown(fds["token"], *self.owner)  # the server opens it by its /proc path, which checks the pipe's owner
        if self.isolated and self.harden:
            fds["seccomp"] = pipe_holding(seccomp.build())
            if self._held is not None and self._held.cgroup is not None:  # opened here: the server, dropped and namespaced, could not
                fds["commands-cgroup"] = os.open(self._held.cgroup.commands_join_file, os.O_WRONLY | os.O_CLOEXEC)
        if self.sizes.workspace is not None:
            self._info, fds["info"] = os.pipe()
        if self.isolated:
            fds.update((f"{STAGED_FD}{index}", os.open(host, os.O_RDONLY | os.O_CLOEXEC)) for index, host in enumerate(staged(self.references).values()))
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
                self._proc = spawner().submit(spawn_in_view, self._view.binds if self._view is not None else [], popen).result()
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
        """End the server and every process it started; remove the private folder.

        One stop at a time: two at once (the runner's Ctrl-C and the sample's own thread) raced on the
        same process and cgroup, and could leave the cgroup v1 freezer FROZEN with the server in it,
        so the other stop waited for it forever.
        """
        with self._stopping:
            self._stop()

    def _stop(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None
        if self._proc is not None:
            pgid = self._proc.pid
            signal_group(pgid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            signal_group(pgid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None
        kill_marked(f"{MARKER_ENV}={self._id}".encode())
        if self._held is not None:
            self._held.release()
            self._held = None
        for fd in (self._info, self._workspace_fd):
            if fd is not None:
                os.close(fd)
        self._info = self._workspace_fd = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = None
        if self._view is not None:
            self._view.remove()
            self._view = None


def _socket_base() -> str:
    """Where the private socket folder goes: a unix socket path must fit in 108 bytes, so a long
    TMPDIR (pytest's, say) falls back to /tmp."""
    base = tempfile.gettempdir()
    return base if len(base) <= 48 else "/tmp"

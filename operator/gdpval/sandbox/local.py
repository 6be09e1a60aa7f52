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

As root, bubblewrap's user namespace would map the sandbox's uid to host root: all capabilities
are dropped, but plain file permissions would let a command read root-only files such as
/etc/shadow. So a root runner's sandboxes run as an unprivileged host uid and gid instead
(GDPVAL_SANDBOX_UID, `uid` or `uid:gid`, default 65533): the sample's cgroup is joined as root, then
setpriv drops to that uid and execs bubblewrap; the workspace is made theirs, and the folders bubblewrap
binds are reached through a view (see _spawn_in_view), since that uid cannot walk root's private
folders. A non-root runner's sandboxes run as its own uid. Files (references, the tool server) are
copied in from descriptors this process opened, not bound: see LocalSandbox._staged.

With the network on, the sandbox still has its own network namespace: pasta (Debian package passt)
creates it, gives it a copy of the host's IPv4 address and routes, and carries its connections out
through sockets of its own on the host, as user-mode NAT. Nothing of the host's network namespace is
in reach: its 127.0.0.1 and abstract unix sockets stay the host's (pasta's mapping of the gateway to
the host's loopback and its port forwards are off), and link-local addresses (cloud metadata
services) are unreachable. IPv6 is not offered: its link-local and metadata ranges would need more.

bubblewrap's --die-with-parent fires when the *thread* that forked it exits, so every server is
forked by one spawner thread that lives as long as the process: sandboxes can be started from
short-lived threads and still die with the runner.
"""

from __future__ import annotations

import contextlib
import ctypes
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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Literal

from gdpval import contract
from gdpval.errors import GdpvalError
from gdpval.sandbox import seccomp
from gdpval.sandbox.client import SandboxClient, SandboxUnavailable
from gdpval.sandbox.limits import CLONE_NEWNS, IMAGE_FILE, MS_BIND, MS_PRIVATE, MS_REC, OWNER_FILE, RUNTIME_PREFIX, Limits, MemoryFilesystems, libc
from gdpval.sandbox.limits import PREFIX as CGROUP_PREFIX
from gdpval.sandbox.limits.cgroups import SampleCgroup, cgroup_support
from gdpval.sandbox.limits.disk import LoopDisk, loop_disk_support, memory_workspace, remove_orphans
from gdpval.sandbox.runtime import Runtime, root_binds

Isolation = Literal["auto", "bwrap", "none"]

log = logging.getLogger(__name__)

BWRAP = "/usr/bin/bwrap"
TOOLSERVER = Path(__file__).with_name("toolserver.py")
SETPRIV = "/usr/bin/setpriv"
PASTA = "/usr/bin/pasta"
IP = "/usr/sbin/ip"
CLOSED_RANGES = ("169.254.0.0/16",)  # link-local: cloud metadata services; the host's loopback is never routed to
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARKER_ENV = "GDPVAL_SANDBOX_ID"
READY_TIMEOUT_S = 20.0
STOP_GRACE_S = 3.0
SANDBOX_UID = 1000  # who commands run as inside; on the host, the runner's uid, or a root runner's sandbox owner
OWNER_ENV = "GDPVAL_SANDBOX_UID"
DEFAULT_OWNER = 65533  # Debian reserves 65000-65533 and systemd allocates none of 65520-65533: no account has it
VIEW_PREFIX = "gdpval-view-"
STAGED_FD = "staged-"  # descriptors of the files bubblewrap copies in (see LocalSandbox._staged)
MS_RDONLY = 1
VIEW_BASE = "/tmp"  # not TMPDIR: the view's own path must be walkable by the dropped uid


class SandboxOwnerError(GdpvalError):
    """GDPVAL_SANDBOX_UID does not name an unprivileged uid (and gid)."""


def parse_owner(text: str) -> tuple[int, int]:
    """The host uid and gid `uid` or `uid:gid` names; root and the kernel's reserved -1 and -2 are refused."""
    parts = text.strip().split(":")
    ids = [int(part) for part in parts if part.isdigit()]
    if len(ids) != len(parts) or len(ids) not in (1, 2) or not all(0 < i < 2**32 - 2 for i in ids):
        raise SandboxOwnerError(f"{OWNER_ENV}={text!r}: give `uid` or `uid:gid` of an unprivileged, unused account (default {DEFAULT_OWNER})")
    return ids[0], ids[-1]


def sandbox_owner() -> tuple[int, int] | None:
    """The host uid and gid a root runner's sandboxes drop to; None for a non-root runner (its own uid is unprivileged)."""
    if os.geteuid() != 0:
        return None
    return parse_owner(os.environ.get(OWNER_ENV) or str(DEFAULT_OWNER))


def _dropping(argv: list[str], owner: tuple[int, int] | None) -> list[str]:
    """`argv` run as `owner` (uid, gid, no supplementary groups) when given: setpriv is run by root, not setuid."""
    if owner is None:
        return argv
    uid, gid = owner
    return [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def _namespace_args(network: bool, seccomp_fd: int | None, sizes: MemoryFilesystems | None, system: Runtime, root: str | None = None) -> list[str]:
    """Namespaces and privileges: a user namespace whose one uid maps to the uid bubblewrap runs as
    (the runner's, or a root runner's sandbox owner), so the sandbox holds no capability on the host; no capability inside it
    either, no further user namespaces, the seccomp filter read from `seccomp_fd`, and a /tmp and
    /dev/shm of `sizes`. The server is PID 1 of the pid namespace, which its commands cannot
    kill (see toolserver.py). Without a filter (benchmarks only) none of that hardening is applied. The system
    folders come read-only from `system` (the host's, or an unpacked image's, found at `root` if given)."""
    args = ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--die-with-parent"]
    if seccomp_fd is not None:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--cap-drop", "ALL"]
        args += ["--unshare-cgroup", "--seccomp", str(seccomp_fd)]
    if not network:
        args.append("--unshare-net")
    tmp, shm = (["--size", str(size)] for size in (sizes.tmp, sizes.shm)) if sizes is not None else ([], [])
    return args + root_binds(system, root) + ["--proc", "/proc", "--dev", "/dev", *tmp, "--tmpfs", "/tmp", *shm, "--tmpfs", "/dev/shm"]


def _networked(argv: list[str]) -> list[str]:
    """`argv` in a network namespace of its own behind pasta's user-mode NAT (IPv4 only), with the
    link-local range unreachable: pasta's user namespace lets the route be set before `argv` runs."""
    pasta = [PASTA, "--config-net", "--foreground", "--quiet", "--ipv4-only", "--no-map-gw"]
    pasta += ["--tcp-ports", "none", "--udp-ports", "none", "--tcp-ns", "none", "--udp-ns", "none"]
    routes = " && ".join(f"{IP} route add unreachable {cidr}" for cidr in CLOSED_RANGES)
    return [*pasta, "--", "/bin/sh", "-c", f'{routes} && exec "$@"', "sh", *argv]


@functools.cache
def network_status() -> tuple[bool, str]:
    """Whether a sandbox can have the network in a namespace of its own here (a trial runs `true`), and why not."""
    for path, package in ((PASTA, "passt"), (IP, "iproute2")):
        if not os.access(path, os.X_OK):
            return False, f"{path} not found (Debian package: {package})"
    argv = _dropping(_networked(["/usr/bin/true"]), sandbox_owner())
    try:
        proc = subprocess.Popen(
            argv, env={"PATH": CLEAN_PATH}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        return False, f"trial pasta namespace failed: {exc}"
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    _signal_group(proc.pid, signal.SIGKILL)  # a pasta that failed leaves a forked helper behind, holding stderr
    assert proc.stderr is not None
    with proc.stderr:
        stderr = proc.stderr.read().decode(errors="replace")
    if proc.wait() != 0:
        said = " ".join(line for line in stderr.splitlines() if "syslog" not in line).strip()
        hint = " (/dev/net/tun must be usable by every user, mode 0666 as Debian's udev sets it)" if "tun" in said else ""
        return False, f"trial pasta namespace failed: {said or proc.returncode}{hint}"
    return True, "pasta works"


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
    if os.geteuid() == 0 and not os.access(SETPRIV, os.X_OK):
        return False, f"{SETPRIV} not found (Debian package: util-linux), needed to drop root for sandboxes"
    try:
        filter_fd = _pipe_holding(seccomp.build())
    except ValueError as exc:
        return False, str(exc)
    sizes = Limits.of().filesystems(workspace_in_memory=False)
    argv = [BWRAP, *_namespace_args(False, filter_fd, sizes, Runtime()), "--remount-ro", "/", "--", "/usr/bin/true"]
    argv = _dropping(argv, sandbox_owner())
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


_host_mounts: list[int] = []  # the spawner thread's descriptor of the host's mount namespace, once it left it


def _check(result: int, call: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{call}: {os.strerror(ctypes.get_errno())}")


def _layer(source: str, place: str, empty: str) -> bool:
    """Mount `source` read-only on `place` as an overlay over an `empty` folder, naming both layers by
    descriptor: a bind's mount root in /proc/self/mountinfo is its path in its file system (the runtime's
    folder under the home's cache), an overlay's is `/` with the layers as given here. False where this
    kernel or file system refuses the overlay (the caller binds instead)."""
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for path in (source, empty)]
    try:
        options = "lowerdir=" + ":".join(f"/proc/self/fd/{fd}" for fd in fds)
        return libc().mount(b"gdpval-runtime", os.fsencode(place), b"overlay", MS_RDONLY, options.encode()) == 0
    finally:
        for fd in fds:
            os.close(fd)


def _spawn_in_view(binds: list[tuple[str, str, str | None]], popen: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """In the spawner thread: start `popen` in a private copy of the host's mount namespace where each
    source is bound on its place in the view (or layered over the empty folder given, see _layer); the thread
    then returns to the host's namespace, and the copy lives as long as the sandbox. The binds never reach
    the host, and a killed runner leaves none.

    A mount namespace is per thread, so the rest of the runner (the sample threads that mount workspace
    disks, collect deliverables) stays in the host's; a fresh copy per sandbox sees the disks mounted
    since. bubblewrap binds the view's paths as the dropped uid, which could not walk to the sources.
    """
    if not binds:
        return popen()
    if not _host_mounts:
        _host_mounts.append(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
    _check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    try:
        _check(libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the sandbox's mounts private")
        for source, place, empty in binds:
            if empty is None or not _layer(source, place, empty):
                _check(libc().mount(os.fsencode(source), os.fsencode(place), None, MS_BIND | MS_REC, None), f"binding {source!r} on {place!r}")
        return popen()
    finally:
        _check(libc().setns(_host_mounts[0], CLONE_NEWNS), "returning to the host's mount namespace")


@functools.cache
def _remove_orphan_views() -> None:
    """The views a killed runner left (empty places, and copies only their uid may read); once per process."""
    remove_orphans(Path(VIEW_BASE), VIEW_PREFIX)


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


def _server_pid(marker: bytes, child_pid: int) -> int:
    """The host pid of a sandbox's server: PID 1 of its pid namespace, `child_pid` in the one above (which
    bubblewrap's --info-fd names: with the network on, pasta puts bubblewrap in a pid namespace of its own),
    and a child of this sandbox's bubblewrap (the server's own environment is unreadable: it is not dumpable)."""
    marked = {str(pid) for pid in _marked_pids(marker)}
    for entry in os.listdir("/proc"):
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if status.get("NSpid", "").split()[-2:] == [str(child_pid), "1"] and status.get("PPid", "").strip() in marked:
            return int(entry)
    raise SandboxUnavailable(f"the tool server (pid {child_pid} in bubblewrap's namespace) is gone")


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
        self._cgroup: SampleCgroup | None = None
        self._disk: LoopDisk | None = None
        self.sizes = self.limits.filesystems(workspace_in_memory=self.isolated and self.harden and memory_workspace())
        self._info: int | None = None  # read end of bubblewrap's --info-fd, which names the server's host pid
        self._workspace_fd: int | None = None  # the in-memory workspace, opened through the server's root
        self.owner = sandbox_owner() if self.isolated and self.harden else None
        self._view: Path | None = None  # where bubblewrap finds its sources when dropping privileges
        self._binds: list[tuple[str, str, str | None]] = []  # (host source, its place in the view, an empty layer to overlay it on)
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

    def _view_path(self, name: str) -> Path:
        if self._view is None:
            raise SandboxUnavailable("the sandbox's view has not been prepared")
        return self._view / name

    def _source(self, host: Path, name: str) -> str:
        """Where bubblewrap finds `host`: in the view when privileges are dropped (see _prepare_view), else itself."""
        return str(self._view_path(name) if self.owner is not None else host)

    def _bwrap_argv(self, fds: dict[str, int]) -> list[str]:
        root = self._source(self.system.root, "root") if self.system.root is not None else None
        args = [BWRAP, *_namespace_args(self.network, fds.get("seccomp"), self.sizes if self.harden else None, self.system, root)]
        if self.sizes.workspace is None:
            args += ["--bind", self._source(self.workspace, "workspace"), contract.WORKSPACE]
        else:
            args += ["--info-fd", str(fds["info"]), "--size", str(self.sizes.workspace), "--tmpfs", contract.WORKSPACE]
        args += ["--dir", contract.REFERENCES]
        for index, place in enumerate(self._staged()):
            args += ["--perms", "0444", "--ro-bind-data", str(fds[f"{STAGED_FD}{index}"]), place]
        args += ["--remount-ro", "/", "--chdir", contract.WORKSPACE]
        argv = [*args, "--", self.python, contract.TOOLSERVER, *self._server_args(fds, contract.WORKSPACE)]
        if self.harden:
            argv += ["--max-procs", str(self.limits.pids), "--max-file-bytes", str(self.limits.disk_bytes), *self._memory_args(fds)]
        if self.network:
            argv = _networked(argv)
        if not self.harden:
            return argv
        argv = _dropping(argv, self.owner)
        if self._cgroup is None:
            return argv
        joins = " && ".join(f"echo $$ > {shlex.quote(path)}" for path in self._cgroup.procs_files)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def _staged(self) -> dict[str, Path]:
        """The files bubblewrap copies into the sandbox (its place there: the host file), not binds: a bind's
        mount root in /proc/self/mountinfo is its host path (the dataset folder, this package's), a copy's
        is bubblewrap's own tmpfs. They are read through descriptors this process opened, so a root
        runner's dropped uid reads references it could not open itself. A pod's stage copies them too."""
        return {**{f"/{dataset_path}": host for dataset_path, host in sorted(self.references.items())}, contract.TOOLSERVER: TOOLSERVER}

    def _memory_args(self, fds: dict[str, int]) -> list[str]:
        """The commands' memory cap: their own cgroup where the sample has one, else a per-process RLIMIT_DATA."""
        if "commands-cgroup" in fds:
            return ["--commands-cgroup", str(fds["commands-cgroup"])]
        return ["--max-data-bytes", str(self.limits.memory_bytes)]

    def _prepare_view(self, uid: int, gid: int) -> None:
        """Ready a sandbox that drops to uid:gid: the workspace becomes theirs, and each folder bubblewrap binds
        gets an empty place in a view folder that uid can walk, on which _spawn_in_view binds it (that uid
        cannot walk root's private folders, such as a 0700 TMPDIR or /root). The runtime's root is layered, not
        bound, so that the sandbox's mountinfo does not name where it was unpacked."""
        os.chown(self.workspace, uid, gid)
        _remove_orphan_views()
        self._view = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX, dir=VIEW_BASE))
        (self._view / OWNER_FILE).write_text(str(os.getpid()))
        self._view.chmod(0o711)
        sources = {"workspace": self.workspace}
        if self.system.root is not None:
            sources["root"] = self.system.root
            self._view_path("empty").mkdir()
        for name, host in sources.items():
            self._view_path(name).mkdir()
            self._binds.append((str(host), str(self._view_path(name)), str(self._view_path("empty")) if name == "root" else None))

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
                self._prepare_view(*self.owner)
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
        name = f"{CGROUP_PREFIX}{self._id}"
        if not cgroup_support(self.limits.cpus is not None):
            self._cgroup = SampleCgroup(name, self.limits)
        if not loop_disk_support():
            self._disk = LoopDisk(self.runtime / IMAGE_FILE, self.workspace, self.limits.disk_bytes)

    @property
    def host_workspace(self) -> Path:
        """Where this process reads the workspace (deliverables): the host folder, or for an in-memory
        workspace, the descriptor of the server's /workspace, valid until stop()."""
        if self._workspace_fd is not None:
            return Path(f"/proc/self/fd/{self._workspace_fd}")
        return self.workspace

    def _open_workspace(self) -> None:
        """Open the in-memory workspace through the root of the server (see _server_pid), once it answers and
        before any command ran. The descriptor keeps the tmpfs while it is held."""
        assert self._info is not None and self._proc is not None
        with os.fdopen(self._info, "rb") as info:
            self._info = None
            child = int(json.loads(info.read1(4096))["child-pid"])  # one small write to a pipe: whole or not at all
        pid = _server_pid(f"{MARKER_ENV}={self._id}".encode(), child)
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
        fds = {"listen": listener.fileno(), "lifeline": lifeline, "token": _pipe_holding(self.token.encode())}
        if self.owner is not None:
            os.fchown(fds["token"], *self.owner)  # the server opens it by its /proc path, which checks the pipe's owner
        if self.isolated and self.harden:
            fds["seccomp"] = _pipe_holding(seccomp.build())
            if self._cgroup is not None:  # opened here: the server, dropped and namespaced, could not
                fds["commands-cgroup"] = os.open(self._cgroup.commands_join_file, os.O_WRONLY | os.O_CLOEXEC)
        if self.sizes.workspace is not None:
            self._info, fds["info"] = os.pipe()
        if self.isolated:
            fds.update((f"{STAGED_FD}{index}", os.open(host, os.O_RDONLY | os.O_CLOEXEC)) for index, host in enumerate(self._staged().values()))
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
                self._proc = _spawner().submit(_spawn_in_view, self._binds, popen).result()
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
        for fd in (self._info, self._workspace_fd):
            if fd is not None:
                os.close(fd)
        self._info = self._workspace_fd = None
        if self._runtime is not None:
            shutil.rmtree(self._runtime, ignore_errors=True)
            self._runtime = None
        if self._view is not None:
            shutil.rmtree(self._view, ignore_errors=True)
            self._view = None
        self._binds = []


def _socket_base() -> str:
    """Where the private socket folder goes: a unix socket path must fit in 108 bytes, so a long
    TMPDIR (pytest's, say) falls back to /tmp."""
    base = tempfile.gettempdir()
    return base if len(base) <= 48 else "/tmp"

"""Per-sample cgroups (v1 or v2), and on v2 a delegated systemd scope for a non-root runner."""

from __future__ import annotations

import functools
import os
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gdpval.sandbox.limits import PREFIX, Limits, run_tool
from gdpval.settings import MIB

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")
CPU_PERIOD_US = 100_000
KILL_WAIT_S = 3.0
STALE_S = 60.0
SERVER_RESERVE = 64 * MIB  # the tool server's own memory, beside its commands' cap
RUNNER_LEAF = "gdpval-runner"  # on v2 where the runner's processes go once its cgroup has controllers for children
SCOPE_PREFIX = "gdpval-run-"  # the delegated systemd scope a non-root runner on v2 asks for
BUSCTL = "/usr/bin/busctl"
SCOPE_WAIT_S = 10.0
COMMANDS = "commands"  # the commands' memory cgroup, a child of the sample's
SERVER = "server"  # on v2 the server's leaf: a cgroup whose children have controllers holds no process


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under "" its v2 path."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


@functools.cache
def cgroup_version() -> int:
    """2 on a unified hierarchy, 1 when the controllers sit in v1 hierarchies, 0 when neither is mounted."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return 2
    return 1 if (CGROUP_ROOT / "memory").is_dir() else 0


def sample_parent(controller: str) -> Path:
    """Where the sample cgroups go: the runner's own cgroup (on v2 above the leaf it may have moved to)."""
    own = _own_cgroups()
    if cgroup_version() == 2:
        return CGROUP_ROOT / own.get("", "/").removesuffix(f"/{RUNNER_LEAF}").lstrip("/")
    return CGROUP_ROOT / controller / own.get(controller, "/").lstrip("/")


def _writable(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _v2_controllers(parent: Path) -> set[str]:
    try:
        return set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def _v2_enable(parent: Path, wanted: set[str]) -> bool:
    """Enable controllers for children; a cgroup holding processes must first move them to a leaf."""
    missing = wanted - _v2_controllers(parent)
    if not missing:
        return True
    try:
        (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(missing)))
    except OSError:
        try:
            leaf = parent / RUNNER_LEAF
            leaf.mkdir(exist_ok=True)
            for pid in (parent / "cgroup.procs").read_text().split():
                try:
                    (leaf / "cgroup.procs").write_text(pid)
                except OSError:
                    continue
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(missing)))
        except OSError:
            return False
    return not wanted - _v2_controllers(parent)


@dataclass(frozen=True)
class CgroupHost:
    """What decides whether systemd can give a non-root runner a delegated cgroup v2 scope."""

    version: int  # cgroup_version()
    user_bus: bool  # a systemd user manager answers on the session bus
    busctl: bool


def delegation(host: CgroupHost) -> str:
    """ "" when the runner should ask systemd's user manager for a delegated scope, else why none is available."""
    if host.version != 2:
        mounted = "no cgroup hierarchy is mounted" if host.version == 0 else "this host's controllers are in cgroup v1 hierarchies"
        return f"no delegated cgroup v2 scope ({mounted}; systemd delegates only on the unified hierarchy)"
    if not host.user_bus:
        return "no delegated cgroup v2 scope (no systemd user manager: no session bus in $DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR/bus)"
    if not host.busctl:
        return f"no delegated cgroup v2 scope ({BUSCTL} is missing, Debian package: systemd)"
    return ""


def scope_request(pid: int) -> list[str]:
    """The call asking systemd's user manager to move `pid` into a new scope whose cgroup it delegates to the
    user (what `systemd-run --user --scope -p Delegate=yes` asks for itself), as busctl takes it."""
    manager = ["org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "StartTransientUnit"]
    properties = ["2", "PIDs", "au", "1", str(pid), "Delegate", "b", "true"]
    return [BUSCTL, "--user", "--quiet", "call", *manager, "ssa(sv)a(sa(sv))", f"{SCOPE_PREFIX}{pid}.scope", "fail", *properties, "0"]


def _user_bus() -> bool:
    if os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    try:
        return stat.S_ISSOCK(os.stat(Path(runtime) / "bus").st_mode)
    except OSError:
        return False


@functools.cache
def delegated_scope() -> tuple[str, str]:
    """(the scope, "") once this process sits in a systemd scope delegated to its user, else ("", why not).
    The job that moves the process runs after busctl returns: its cgroup is watched until it has moved."""
    why = delegation(CgroupHost(cgroup_version(), _user_bus(), os.access(BUSCTL, os.X_OK)))
    if why:
        return "", why
    pid = os.getpid()
    unit = f"{SCOPE_PREFIX}{pid}.scope"
    try:
        run_tool(scope_request(pid))
    except (OSError, subprocess.SubprocessError) as exc:
        return "", f"no delegated cgroup v2 scope (systemd's user manager refused: {exc})"
    deadline = time.monotonic() + SCOPE_WAIT_S
    while not _own_cgroups().get("", "").endswith(f"/{unit}"):
        if time.monotonic() > deadline:
            return "", f"no delegated cgroup v2 scope (systemd did not move the runner into {unit})"
        time.sleep(0.01)
    return unit, ""


@functools.cache
def cgroup_support(cpu: bool) -> str:
    """ "" when a per-sample cgroup with memory, pids (and cpu) can be made here, else why not. A non-root
    runner on v2 first asks systemd for a delegated scope (see delegated_scope)."""
    version = cgroup_version()
    if version == 0:
        return f"no cgroup hierarchy is mounted; {delegated_scope()[1]}"
    if version == 2:
        parent = sample_parent("")
        if not _writable(parent) and (why := delegated_scope()[1]):
            return f"cgroup v2: {parent} is not writable by this user; {why}"
        parent = sample_parent("")
        wanted = {"memory", "pids", *(["cpu"] if cpu else [])}
        return "" if _v2_enable(parent, wanted) else f"cgroup v2: cannot enable {', '.join(sorted(wanted))} under {parent}"
    wanted_v1 = [c for c in V1_CONTROLLERS if c != "cpu" or cpu]
    for controller in wanted_v1:
        parent = sample_parent(controller)
        if not _writable(parent):
            return f"cgroup v1: {parent} is missing or not writable by this user; {delegated_scope()[1]}"
    return ""


@functools.cache
def _sweep_stale(parent: Path) -> None:
    """Remove empty sample cgroups a killed runner left behind (a minute old: a live one is never empty that long)."""
    for path in parent.glob(f"{PREFIX}*"):
        try:
            if time.time() - path.stat().st_mtime > STALE_S and not any(p.read_text().strip() for p in path.glob("**/cgroup.procs")):
                _remove_tree(path)
        except OSError:
            continue


def _remove_tree(path: Path) -> None:
    """Remove a cgroup and its children (a cgroup's files go with its directory); a busy one stays."""
    for child in [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []:
        _remove_tree(child)
    try:
        path.rmdir()
    except OSError:
        pass


def _v1_memory(path: Path, limit: int) -> None:
    (path / "memory.limit_in_bytes").write_text(str(limit))
    if (path / "memory.memsw.limit_in_bytes").exists():
        (path / "memory.memsw.limit_in_bytes").write_text(str(limit))


def _v2_memory(path: Path, limit: int) -> None:
    (path / "memory.max").write_text(str(limit))
    if (path / "memory.swap.max").exists():
        (path / "memory.swap.max").write_text("0")


class SampleCgroup:
    """One sample's cgroup: v1 one directory per controller hierarchy, v2 one directory."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.version = cgroup_version()
        controllers = [""] if self.version == 2 else [c for c in V1_CONTROLLERS if c != "cpu" or limits.cpus is not None]
        self.dirs = {c: sample_parent(c) / name for c in controllers}
        for path in self.dirs.values():
            _sweep_stale(path.parent)
        for path in self.dirs.values():
            path.mkdir()
        self.memory = self.dirs["memory" if self.version == 1 else ""]
        try:
            self._apply(limits)
        except OSError:
            self.remove()
            raise

    def _write(self, controller: str, name: str, value: str) -> None:
        (self.dirs[controller] / name).write_text(value)

    def _apply(self, limits: Limits) -> None:
        quota = None if limits.cpus is None else int(limits.cpus * CPU_PERIOD_US)
        total = limits.memory_bytes + SERVER_RESERVE
        if self.version == 2:
            _v2_memory(self.memory, total)
            self._write("", "pids.max", str(limits.pids))
            if quota is not None:
                self._write("", "cpu.max", f"{quota} {CPU_PERIOD_US}")
            (self.memory / "cgroup.subtree_control").write_text("+memory")
            (self.memory / SERVER).mkdir()
            (self.memory / COMMANDS).mkdir()
            _v2_memory(self.memory / COMMANDS, limits.memory_bytes)
            return
        _v1_memory(self.memory, total)
        (self.memory / COMMANDS).mkdir()
        _v1_memory(self.memory / COMMANDS, limits.memory_bytes)
        self._write("pids", "pids.max", str(limits.pids))
        if quota is not None:
            self._write("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US))
            self._write("cpu", "cpu.cfs_quota_us", str(quota))

    @property
    def procs_files(self) -> list[str]:
        """Where the tool server writes its pid to join the sample's cgroup(s)."""
        if self.version == 2:
            return [str(self.memory / SERVER / "cgroup.procs")]
        return [str(path / "cgroup.procs") for path in self.dirs.values()]

    @property
    def commands_join_file(self) -> Path:
        """What the tool server writes to put commands in their memory cgroup: on v1 its threads join
        (`tasks`), and the commands they fork are born there; on v2 each command moves (`cgroup.procs`)."""
        return self.memory / COMMANDS / ("cgroup.procs" if self.version == 2 else "tasks")

    def _pids(self) -> list[int]:
        pids: set[int] = set()
        for path in self.dirs.values():
            for procs in path.glob("**/cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    continue
        return sorted(pids)

    def kill(self) -> None:
        """Kill every process of the sample: cgroup.kill on v2; on v1 freeze (no forking away), kill, thaw."""
        if not self._pids():  # the usual case: the pid namespace died with bubblewrap
            return
        if self.version == 2 and (self.dirs[""] / "cgroup.kill").exists():
            self._write("", "cgroup.kill", "1")
        else:
            frozen = "freezer" in self.dirs
            if frozen:
                self._write("freezer", "freezer.state", "FROZEN")
            try:
                for pid in self._pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            finally:
                if frozen:  # a frozen process never dies of SIGKILL: whatever happened, thaw
                    self._write("freezer", "freezer.state", "THAWED")
        deadline = time.monotonic() + KILL_WAIT_S
        while self._pids() and time.monotonic() < deadline:
            time.sleep(0.002)

    def remove(self) -> None:
        for path in self.dirs.values():
            _remove_tree(path)

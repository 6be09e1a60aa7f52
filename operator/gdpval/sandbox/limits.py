"""Per-sample resource limits of local sandboxes, and which of them this machine can enforce.

- processes: RLIMIT_NPROC set by the tool server inside the sandbox's own user namespace, where the
  kernel counts only that namespace's tasks (5.14+), so it holds as root and as non-root; a pids
  cgroup backs it where one can be made;
- memory and the CPU quota: a cgroup per sample, v1 (one per controller hierarchy) or v2, made under
  the runner's own cgroup when that is writable (root, or a delegated v2 subtree). The commands get
  a memory cgroup of their own below it, capped at the sample's memory, while the sample's allows the
  tool server SERVER_RESERVE more: the OOM killer then only ever picks among the commands. Without a
  cgroup each command gets the memory as RLIMIT_DATA (a per-process cap, not the sandbox's total);
- /tmp and /dev/shm: tmpfs file systems inside the sandbox, charged to the memory of whoever writes
  them, so sized below it (settings.tmpfs_sizes): filled, they answer ENOSPC and leave processes room;
- disk: as root, /workspace is a sparse ext4 image of the cap, loop-mounted (without loop devices only
  a per-file cap, RLIMIT_FSIZE, holds). A non-root runner's /workspace is a size-capped tmpfs that
  bubblewrap mounts in the sandbox's own mount namespace, which an unprivileged user may do: a total
  cap, but held in memory, so it takes a quarter of the memory setting from /tmp's half
  (`Limits.filesystems`). Not as root: files root puts in it would belong to no uid of the sandbox;
- memory without a writable cgroup: on cgroup v2 with a systemd user manager, the runner asks it for a
  delegated scope of its own (`delegation`), whose cgroup it may then divide as root divides its own;
- the end of a sample: bubblewrap's pid namespace dies with its first process, taking every process
  of the sample; the cgroup is also killed (cgroup.kill on v2, freeze and kill on v1).
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import functools
import os
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gdpval.errors import GdpvalError
from gdpval.settings import MIB, SandboxSettings, tmpfs_sizes

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")
CPU_PERIOD_US = 100_000
KILL_WAIT_S = 3.0
MKFS = "/usr/sbin/mkfs.ext4"
MKFS_OPTIONS = "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0"
TEMPLATE_PREFIX = "gdpval-disk-"
# <linux/loop.h>, <linux/mount.h>
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LOOP_CONFIG_SIZE = 8 + 232 + 64  # fd, block_size, struct loop_info64, reserved
LO_FLAGS_OFFSET = 8 + 52
LO_FLAGS_AUTOCLEAR = 4
MS_NOSUID, MS_NODEV, MS_NOATIME = 2, 4, 1024
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
CLONE_NEWNS = 0x00020000  # <sched.h>
MNT_DETACH = 2
MAX_INODES = 262_144  # files and folders of one workspace
INODE_RATIO = 16_384  # ext4's default bytes per inode, for small disks
PREFIX = "gdpval-"
RUNTIME_PREFIX = "gdpval-sbx-"  # the sandbox's private folder, which holds the image
IMAGE_FILE = "disk.img"
OWNER_FILE = "owner"
STALE_S = 60.0
SERVER_RESERVE = 64 * MIB  # the tool server's own memory, beside its commands' cap
RUNNER_LEAF = "gdpval-runner"  # on v2 where the runner's processes go once its cgroup has controllers for children
SCOPE_PREFIX = "gdpval-run-"  # the delegated systemd scope a non-root runner on v2 asks for
BUSCTL = "/usr/bin/busctl"
SCOPE_WAIT_S = 10.0
COMMANDS = "commands"  # the commands' memory cgroup, a child of the sample's
SERVER = "server"  # on v2 the server's leaf: a cgroup whose children have controllers holds no process


@dataclass(frozen=True)
class MemoryFilesystems:
    """Bytes of the tmpfs mounts of a sandbox; `workspace` is None when /workspace is on a disk."""

    workspace: int | None
    tmp: int
    shm: int


@dataclass(frozen=True)
class Limits:
    """A sample's limits in the units the kernel takes; the defaults are the settings' (SandboxSettings)."""

    memory_bytes: int
    pids: int
    disk_bytes: int
    cpus: float | None = None
    strict: bool = False

    def filesystems(self, workspace_in_memory: bool) -> MemoryFilesystems:
        """Sizes of the sandbox's memory-backed file systems. Filled together they leave a quarter of the
        memory to processes: with the workspace among them, it takes a quarter (at most the disk cap)
        from /tmp's half."""
        tmp, shm = tmpfs_sizes(self.memory_bytes)
        if not workspace_in_memory:
            return MemoryFilesystems(None, tmp, shm)
        workspace = min(self.disk_bytes, tmp // 2)
        return MemoryFilesystems(workspace, tmp - workspace, shm)

    @classmethod
    def of(cls, sandbox: SandboxSettings | None = None) -> Limits:
        s = sandbox or SandboxSettings()
        return cls(s.memory_mib * MIB, s.pids, s.disk_mib * MIB, s.cpus, s.strict_limits)


class LimitUnavailable(GdpvalError):
    """A limit cannot be enforced here and the run asked for strict limits."""


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


def _parent(controller: str) -> Path:
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
        _run(scope_request(pid))
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
        parent = _parent("")
        if not _writable(parent) and (why := delegated_scope()[1]):
            return f"cgroup v2: {parent} is not writable by this user; {why}"
        parent = _parent("")
        wanted = {"memory", "pids", *(["cpu"] if cpu else [])}
        return "" if _v2_enable(parent, wanted) else f"cgroup v2: cannot enable {', '.join(sorted(wanted))} under {parent}"
    wanted_v1 = [c for c in V1_CONTROLLERS if c != "cpu" or cpu]
    for controller in wanted_v1:
        parent = _parent(controller)
        if not _writable(parent):
            return f"cgroup v1: {parent} is missing or not writable by this user; {delegated_scope()[1]}"
    return ""


@functools.cache
def loop_disk_support() -> str:
    """ "" when a loop-mounted image can hold /workspace (root with mkfs.ext4 and loop devices), else why not."""
    if os.geteuid() != 0:
        return "only root can loop-mount a per-sample disk"
    if not os.access(MKFS, os.X_OK):
        return f"{MKFS} is missing (Debian package: e2fsprogs)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    return ""


def memory_workspace() -> bool:
    """Whether sandboxes get their /workspace as a tmpfs of their own (see the module's docstring)."""
    return os.geteuid() != 0


def report(limits: Limits) -> list[tuple[str, bool, str]]:
    """(limit, enforced, how or why not) for each limit, as the run prints it at start."""
    cgroup = cgroup_support(limits.cpus is not None)
    scope = _parent("").name if cgroup_version() == 2 else ""
    via = f"cgroup v{cgroup_version()}" + (f" (the delegated systemd scope {scope})" if scope.startswith(SCOPE_PREFIX) else "")
    disk = loop_disk_support()
    sizes = limits.filesystems(workspace_in_memory=memory_workspace())
    tmp, shm = sizes.tmp >> 20, sizes.shm >> 20
    memory = f"{limits.memory_bytes >> 20} MiB"
    rows = [
        ("processes", True, f"{limits.pids}: RLIMIT_NPROC in the sandbox's user namespace" + ("" if cgroup else f" and {via} pids.max")),
        (
            "memory",
            not cgroup,
            f"{memory} for the commands, {'/tmp and /dev/shm' if sizes.workspace is None else '/tmp, /dev/shm and /workspace'} included: "
            f"{via}, the tool server outside their cgroup"
            if not cgroup
            else f"not enforced for the sandbox's total ({cgroup}); {memory} per process (RLIMIT_DATA)",
        ),
        ("tmpfs", True, f"/tmp {tmp} MiB and /dev/shm {shm} MiB: sized tmpfs in the sandbox's mount namespace"),
        ("disk", not disk or sizes.workspace is not None, _disk_line(limits, sizes.workspace, disk)),
    ]
    if limits.cpus is not None:
        rows.append(("cpu", not cgroup, f"{limits.cpus:g} cores: {via}" if not cgroup else f"not enforced: {cgroup}"))
    return rows


def _disk_line(limits: Limits, in_memory: int | None, no_loop: str) -> str:
    if in_memory is None:
        return f"not enforced ({no_loop}); only a per-file cap" if no_loop else f"{limits.disk_bytes >> 20} MiB: loop-mounted ext4 image"
    asked = "" if in_memory == limits.disk_bytes else f" of the {limits.disk_bytes >> 20} asked"
    held = "held in memory, so a quarter of the memory setting at most"
    return f"{in_memory >> 20} MiB{asked}: a size-capped tmpfs in the sandbox's mount namespace ({no_loop}), {held}"


def check(limits: Limits) -> list[str]:
    """The lines to print at start; raises LimitUnavailable for an unenforced limit under strict limits."""
    rows = report(limits)
    missing = [f"{name} {how}" for name, enforced, how in rows if not enforced]
    if missing and limits.strict:
        raise LimitUnavailable("sandbox limits cannot be enforced here (strictLimits is on): " + "; ".join(missing))
    return [f"sandbox {name}: {how}" for name, _, how in rows]


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
        self.dirs = {c: _parent(c) / name for c in controllers}
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


class LoopDisk:
    """A sparse ext4 image of the disk cap, loop-mounted (nosuid, nodev) on the host workspace folder.

    The file system is made once per process and per size (`_template`), then each sample gets a
    sparse copy attached and mounted by system calls: no mkfs or mount process per sample. Beside
    the image, `owner` holds the runner's pid, so a runner killed before unmounting leaves a mount
    the next one sweeps away (`sweep_orphan_disks`).
    """

    def __init__(self, image: Path, mountpoint: Path, size: int) -> None:
        self.image, self.mountpoint = image, mountpoint
        sweep_orphan_disks()
        (image.parent / OWNER_FILE).write_text(str(os.getpid()))
        _sparse_copy(_template(size), image)
        device, loop = _attach_loop(image)
        try:
            if libc().mount(os.fsencode(device), os.fsencode(mountpoint), b"ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, None) != 0:
                raise OSError(ctypes.get_errno(), f"mounting {device} on {mountpoint}")
        finally:
            os.close(loop)  # autoclear: once unmounted, nothing holds the device and it frees itself
        (mountpoint / "lost+found").rmdir()

    def remove(self) -> None:
        """Detach the mount (the loop device clears itself when its last user is gone) and delete the image."""
        if os.path.ismount(self.mountpoint):
            libc().umount2(os.fsencode(self.mountpoint), MNT_DETACH)
        self.image.unlink(missing_ok=True)


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def _template(size: int) -> Path:
    """An empty ext4 image of `size` bytes, made once per process (deleted at exit, or by the next
    process when this one was killed).

    No journal, no reserve, no online-resize inode, inode tables initialised lazily: it holds under
    2 MB of data whatever its size, so copying it is cheap.
    """
    remove_orphans(Path(tempfile.gettempdir()), TEMPLATE_PREFIX)
    folder = Path(tempfile.mkdtemp(prefix=TEMPLATE_PREFIX))
    atexit.register(shutil.rmtree, folder, True)
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    image = folder / IMAGE_FILE
    with open(image, "wb") as fh:
        fh.truncate(size)
    _run([MKFS, "-q", "-F", "-m", "0", "-N", str(min(MAX_INODES, size // INODE_RATIO)), "-O", "^has_journal,^resize_inode", "-E", MKFS_OPTIONS, str(image)])
    return image


def remove_orphans(base: Path, prefix: str) -> None:
    """Remove the folders `<base>/<prefix>*` whose owner file names a process that is gone (a killed runner's)."""
    for stale in base.glob(f"{prefix}*"):
        try:
            if not _alive(int((stale / OWNER_FILE).read_text())):
                shutil.rmtree(stale, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _sparse_copy(src: Path, dest: Path) -> None:
    """Copy only the data extents of `src`; the holes stay holes."""
    fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    fout = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fin).st_size
        os.ftruncate(fout, size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after offset
                break
            end = os.lseek(fin, start, os.SEEK_HOLE)
            while start < end:
                start += os.pwrite(fout, os.pread(fin, min(end - start, 1 << 20), start), start)
            offset = end
    finally:
        os.close(fin)
        os.close(fout)


def _attach_loop(image: Path) -> tuple[str, int]:
    """A free loop device bound to `image` (LOOP_CONFIGURE, autoclear) and a descriptor that keeps it
    bound until closed; retried when another thread took the device first."""
    config = bytearray(LOOP_CONFIG_SIZE)
    struct.pack_into("=I", config, LO_FLAGS_OFFSET, LO_FLAGS_AUTOCLEAR)
    fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        struct.pack_into("=I", config, 0, fd)
        for _ in range(64):
            control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
            try:
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            finally:
                os.close(control)
            device = f"/dev/loop{number}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, bytes(config))
                return device, loop
            except OSError as exc:
                os.close(loop)
                if exc.errno != errno.EBUSY:
                    raise
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def sweep_orphan_disks() -> None:
    """Unmount workspace images whose runner is gone (killed before its sandboxes stopped); once per process."""
    for line in os.fsdecode(Path("/proc/self/mountinfo").read_bytes()).split("\n"):  # a path may hold any bytes but these escapes
        fields = line.split(" ")
        source = fields[fields.index("-") + 2] if "-" in fields else ""
        if not source.startswith("/dev/loop"):
            continue
        try:
            image = Path(os.fsdecode(Path(f"/sys/block/{Path(source).name}/loop/backing_file").read_bytes()).removesuffix("\n"))
            owner = int((image.parent / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if image.name == IMAGE_FILE and image.parent.name.startswith(RUNTIME_PREFIX) and not _alive(owner):
            mountpoint = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # the kernel's octal escapes
            libc().umount2(os.fsencode(mountpoint), MNT_DETACH)
            shutil.rmtree(image.parent, ignore_errors=True)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise OSError(f"{shlex.join(argv)[:200]} failed: {done.stderr.strip()[-300:]}")

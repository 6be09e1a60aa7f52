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

Here the limits themselves; `cgroups` makes the cgroups, `disk` the workspace disk, `report` says which
of them this machine enforces.
"""

from __future__ import annotations

import ctypes
import functools
import shlex
import subprocess
from dataclasses import dataclass

from gdpval.errors import GdpvalError
from gdpval.settings import MIB, SandboxSettings, tmpfs_sizes

PREFIX = "gdpval-"
RUNTIME_PREFIX = "gdpval-sbx-"  # the sandbox's private folder, which holds the image
IMAGE_FILE = "disk.img"
OWNER_FILE = "owner"
# <linux/mount.h>, <sched.h>
MS_NOSUID, MS_NODEV, MS_NOATIME = 2, 4, 1024
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
CLONE_NEWNS = 0x00020000
MNT_DETACH = 2


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


@functools.cache
def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def run_tool(argv: list[str]) -> None:
    """Run a host tool (mkfs, busctl); its failure is an OSError naming the command and its last words."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise OSError(f"{shlex.join(argv)[:200]} failed: {done.stderr.strip()[-300:]}")

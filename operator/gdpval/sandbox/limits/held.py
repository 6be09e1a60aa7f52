"""A sample's cgroup and workspace disk, held from the sandbox's start to its stop."""

from __future__ import annotations

from pathlib import Path

from gdpval.sandbox.limits import Limits
from gdpval.sandbox.limits.cgroups import SampleCgroup, cgroup_support
from gdpval.sandbox.limits.disk import LoopDisk, loop_disk_support


class HeldLimits:
    """The cgroup and the loop disk where this machine allows them; released together, the cgroup's
    processes killed first."""

    def __init__(self, name: str, limits: Limits, image: Path, workspace: Path) -> None:
        self.cgroup = None if cgroup_support(limits.cpus is not None) else SampleCgroup(name, limits)
        self.disk: LoopDisk | None = None
        try:
            if not loop_disk_support():
                self.disk = LoopDisk(image, workspace, limits.disk_bytes)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()
            self.cgroup = None
        if self.disk is not None:
            self.disk.remove()
            self.disk = None

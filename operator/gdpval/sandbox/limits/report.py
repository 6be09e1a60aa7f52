"""Which limits this machine enforces, as the run prints them at start, and strict limits' refusal."""

from __future__ import annotations

from gdpval.sandbox.limits import Limits, LimitUnavailable, cgroups, disk


def report(limits: Limits) -> list[tuple[str, bool, str]]:
    """(limit, enforced, how or why not) for each limit, as the run prints it at start."""
    cgroup = cgroups.cgroup_support(limits.cpus is not None)
    scope = cgroups.sample_parent("").name if cgroups.cgroup_version() == 2 else ""
    via = f"cgroup v{cgroups.cgroup_version()}" + (f" (the delegated systemd scope {scope})" if scope.startswith(cgroups.SCOPE_PREFIX) else "")
    no_loop = disk.loop_disk_support()
    sizes = limits.filesystems(workspace_in_memory=disk.memory_workspace())
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
        ("disk", not no_loop or sizes.workspace is not None, _disk_line(limits, sizes.workspace, no_loop)),
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

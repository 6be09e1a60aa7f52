"""What the run says at start about each sandbox limit, strictLimits turning "not enforced" into an error, the sizes
of the memory-backed file systems, and when a non-root runner asks systemd for a delegated cgroup v2 scope."""

from __future__ import annotations

import pytest

from gdpval.errors import GdpvalError
from gdpval.sandbox import limits
from gdpval.sandbox.limits import cgroups, disk, report
from gdpval.settings import SandboxSettings


@pytest.fixture
def nothing_enforceable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A root runner without writable cgroups nor loop devices."""
    monkeypatch.setattr(cgroups, "cgroup_support", lambda cpu: "cgroup v1: /sys/fs/cgroup/memory is not writable by this user")
    monkeypatch.setattr(disk, "loop_disk_support", lambda: "no loop devices (/dev/loop-control)")
    monkeypatch.setattr(disk, "memory_workspace", lambda: False)


def test_unenforced_limits_are_named_at_start(nothing_enforceable: None) -> None:
    lines = report.check(limits.Limits.of(SandboxSettings(cpus=1.5)))
    assert lines[0].startswith("sandbox processes: 1024: RLIMIT_NPROC")
    assert [line.split(":")[0] for line in lines if "not enforced" in line] == ["sandbox memory", "sandbox disk", "sandbox cpu"]
    memory = "sandbox memory: not enforced for the sandbox's total (cgroup v1: /sys/fs/cgroup/memory is not writable by this user)"
    assert f"{memory}; 4096 MiB per process (RLIMIT_DATA)" in lines
    assert "sandbox disk: not enforced (no loop devices (/dev/loop-control)); only a per-file cap" in lines


def test_a_non_root_runners_disk_is_an_in_memory_cap(nothing_enforceable: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disk, "loop_disk_support", lambda: "only root can loop-mount a per-sample disk")
    monkeypatch.setattr(disk, "memory_workspace", lambda: True)
    lines = report.check(limits.Limits.of())
    assert [line.split(":")[0] for line in lines if "not enforced" in line] == ["sandbox memory"]
    assert "sandbox tmpfs: /tmp 1024 MiB and /dev/shm 1024 MiB: sized tmpfs in the sandbox's mount namespace" in lines
    said = "sandbox disk: 1024 MiB of the 10240 asked: a size-capped tmpfs in the sandbox's mount namespace (only root can loop-mount"
    assert any(line.startswith(said) and line.endswith("held in memory, so a quarter of the memory setting at most") for line in lines), lines


def test_strict_limits_refuse_to_run(nothing_enforceable: None) -> None:
    with pytest.raises(GdpvalError, match="strictLimits.*memory not enforced.*disk not enforced"):
        report.check(limits.Limits.of(SandboxSettings(strict_limits=True)))


def test_enforced_limits_say_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "cgroup_support", lambda cpu: "")
    monkeypatch.setattr(disk, "loop_disk_support", lambda: "")
    monkeypatch.setattr(cgroups, "cgroup_version", lambda: 2)
    monkeypatch.setattr(disk, "memory_workspace", lambda: False)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": "/system.slice/gdpval.service"})
    lines = report.check(limits.Limits.of(SandboxSettings(strict_limits=True)))
    assert "sandbox memory: 4096 MiB for the commands, /tmp and /dev/shm included: cgroup v2, the tool server outside their cgroup" in lines
    assert "sandbox tmpfs: /tmp 2048 MiB and /dev/shm 1024 MiB: sized tmpfs in the sandbox's mount namespace" in lines
    assert "sandbox disk: 10240 MiB: loop-mounted ext4 image" in lines


def test_settings_defaults_are_the_documented_ones() -> None:
    sandbox = SandboxSettings()
    assert (sandbox.memory_mib, sandbox.pids, sandbox.disk_mib, sandbox.cpus, sandbox.strict_limits) == (4096, 1024, 10240, None, False)
    assert limits.Limits.of() == limits.Limits(4096 << 20, 1024, 10240 << 20)


def test_tmp_and_shm_leave_a_quarter_of_the_memory_to_processes() -> None:
    sizes = limits.Limits.of(SandboxSettings(memory_mib=256)).filesystems(workspace_in_memory=False)
    assert sizes == limits.MemoryFilesystems(None, 128 << 20, 64 << 20)


@pytest.mark.parametrize(("memory", "disk", "expected"), [(256, 128, (64, 64, 64)), (4096, 10240, (1024, 1024, 1024)), (4096, 100, (100, 1948, 1024))])
def test_an_in_memory_workspace_takes_its_share_from_tmp(memory: int, disk: int, expected: tuple[int, int, int]) -> None:
    sizes = limits.Limits.of(SandboxSettings(memory_mib=memory, disk_mib=disk)).filesystems(workspace_in_memory=True)
    assert (sizes.workspace, sizes.tmp, sizes.shm) == tuple(n << 20 for n in expected)
    assert sizes.workspace + sizes.tmp + sizes.shm <= 3 * (memory << 20) // 4


def test_the_runner_leaf_is_not_where_sample_cgroups_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """On v2 the runner moves its processes to a leaf to give its cgroup controllers; the samples' parent stays."""
    monkeypatch.setattr(cgroups, "cgroup_version", lambda: 2)
    for own in ("/user.slice/gdpval-run-7.scope", f"/user.slice/gdpval-run-7.scope/{cgroups.RUNNER_LEAF}"):
        monkeypatch.setattr(cgroups, "_own_cgroups", lambda own=own: {"": own})
        assert cgroups.sample_parent("") == cgroups.CGROUP_ROOT / "user.slice/gdpval-run-7.scope"


@pytest.mark.parametrize(
    ("host", "why"),
    [
        (cgroups.CgroupHost(version=1, user_bus=True, busctl=True), "controllers are in cgroup v1 hierarchies"),
        (cgroups.CgroupHost(version=0, user_bus=True, busctl=True), "no cgroup hierarchy is mounted"),
        (cgroups.CgroupHost(version=2, user_bus=False, busctl=True), "no systemd user manager"),
        (cgroups.CgroupHost(version=2, user_bus=True, busctl=False), "busctl is missing"),
        (cgroups.CgroupHost(version=2, user_bus=True, busctl=True), ""),
    ],
)
def test_a_delegated_scope_is_asked_for_only_where_systemd_can_give_one(host: cgroups.CgroupHost, why: str) -> None:
    said = cgroups.delegation(host)
    assert (said == "") if not why else (said.startswith("no delegated cgroup v2 scope (") and why in said), said


def test_the_scope_request_moves_this_process_into_a_delegated_scope() -> None:
    argv = cgroups.scope_request(4242)
    assert argv[:4] == [cgroups.BUSCTL, "--user", "--quiet", "call"]
    assert argv[4:9] == ["org.freedesktop.systemd1", "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))"]
    assert argv[9:] == ["gdpval-run-4242.scope", "fail", "2", "PIDs", "au", "1", "4242", "Delegate", "b", "true", "0"]


def test_a_delegated_scope_is_named_where_memory_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups, "cgroup_support", lambda cpu: "")
    monkeypatch.setattr(disk, "memory_workspace", lambda: True)
    monkeypatch.setattr(disk, "loop_disk_support", lambda: "only root can loop-mount a per-sample disk")
    monkeypatch.setattr(cgroups, "cgroup_version", lambda: 2)
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: {"": f"/user.slice/user@1000.service/app.slice/gdpval-run-7.scope/{cgroups.RUNNER_LEAF}"})
    (memory,) = [line for line in report.check(limits.Limits.of()) if line.startswith("sandbox memory")]
    said = "4096 MiB for the commands, /tmp, /dev/shm and /workspace included: cgroup v2 (the delegated systemd scope gdpval-run-7.scope)"
    assert memory.startswith(f"sandbox memory: {said}"), memory

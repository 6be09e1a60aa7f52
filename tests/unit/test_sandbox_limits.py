"""What the run says at start about each sandbox limit, and strictLimits turning "not enforced" into an error."""

from __future__ import annotations

import pytest

from gdpval.errors import GdpvalError
from gdpval.sandbox import limits
from gdpval.settings import SandboxSettings


@pytest.fixture
def nothing_enforceable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "cgroup_support", lambda cpu: "cgroup v1: /sys/fs/cgroup/memory is not writable by this user")
    monkeypatch.setattr(limits, "loop_disk_support", lambda: "only root can loop-mount a per-sample disk")


def test_unenforced_limits_are_named_at_start(nothing_enforceable: None) -> None:
    lines = limits.check(limits.Limits.of(SandboxSettings(cpus=1.5)))
    assert lines[0].startswith("sandbox processes: 1024: RLIMIT_NPROC")
    assert [line.split(":")[0] for line in lines if "not enforced" in line] == ["sandbox memory", "sandbox disk", "sandbox cpu"]
    memory = "sandbox memory: not enforced for the sandbox's total (cgroup v1: /sys/fs/cgroup/memory is not writable by this user)"
    assert f"{memory}; 4096 MiB per process (RLIMIT_DATA)" in lines


def test_strict_limits_refuse_to_run(nothing_enforceable: None) -> None:
    with pytest.raises(GdpvalError, match="strictLimits.*memory not enforced.*disk not enforced"):
        limits.check(limits.Limits.of(SandboxSettings(strict_limits=True)))


def test_enforced_limits_say_how(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "cgroup_support", lambda cpu: "")
    monkeypatch.setattr(limits, "loop_disk_support", lambda: "")
    monkeypatch.setattr(limits, "cgroup_version", lambda: 2)
    lines = limits.check(limits.Limits.of(SandboxSettings(strict_limits=True)))
    assert "sandbox memory: 4096 MiB for the commands, /tmp and /dev/shm included: cgroup v2, the tool server outside their cgroup" in lines
    assert "sandbox tmpfs: /tmp 2048 MiB and /dev/shm 1024 MiB: sized tmpfs in the sandbox's mount namespace" in lines
    assert "sandbox disk: 10240 MiB: loop-mounted ext4 image" in lines


def test_settings_defaults_are_the_documented_ones() -> None:
    sandbox = SandboxSettings()
    assert (sandbox.memory_mib, sandbox.pids, sandbox.disk_mib, sandbox.cpus, sandbox.strict_limits) == (4096, 1024, 10240, None, False)
    assert limits.Limits.of() == limits.Limits(4096 << 20, 1024, 10240 << 20)


def test_tmp_and_shm_leave_a_quarter_of_the_memory_to_processes() -> None:
    assert limits.Limits.of(SandboxSettings(memory_mib=256)).tmpfs_bytes == (128 << 20, 64 << 20)

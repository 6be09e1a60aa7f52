"""The hand-written seccomp program, decoded and run instruction by instruction on chosen syscalls."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from gdpval.sandbox import seccomp

EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS
EAFNOSUPPORT = seccomp.RET_ERRNO | errno.EAFNOSUPPORT
AF_UNIX, AF_INET, AF_NETLINK = 1, 2, 16
ALLOWED = {
    "x86_64": {"read": 0, "write": 1, "openat": 257, "execve": 59, "mknodat": 259, "wait4": 61},
    "aarch64": {"read": 63, "write": 64, "openat": 56, "execve": 221},
}
CLONE_NEWUSER, CLONE_NEWNS, CLONE_THREAD_FLAGS, SIGCHLD = 0x10000000, 0x00020000, 0x003D0F00, 17


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_denied_calls_get_eperm_and_the_rest_pass(arch: str) -> None:
    program = seccomp.build(arch)
    token = seccomp.AUDIT_ARCH[arch]
    assert len(program) % 8 == 0 and len(seccomp.decode(program)) == len(program) // 8
    for name, nr in seccomp.denied_numbers(arch).items():
        assert seccomp.evaluate(program, token, nr) == EPERM, name
    for name, nr in ALLOWED[arch].items():
        assert seccomp.evaluate(program, token, nr) == seccomp.RET_ALLOW, name
    must = ("mount", "ptrace", "pidfd_getfd", "bpf", "keyctl", "perf_event_open", "finit_module", "unshare", "setns", "process_vm_readv", "io_uring_setup")
    for name in must:
        assert name in seccomp.denied_numbers(arch)


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_clone_with_namespace_flags_is_refused_and_clone3_falls_back(arch: str) -> None:
    program = seccomp.build(arch)
    token = seccomp.AUDIT_ARCH[arch]
    clone = seccomp.CLONE[arch]
    assert seccomp.evaluate(program, token, clone, SIGCHLD) == seccomp.RET_ALLOW
    assert seccomp.evaluate(program, token, clone, CLONE_THREAD_FLAGS) == seccomp.RET_ALLOW
    assert seccomp.evaluate(program, token, clone, SIGCHLD | CLONE_NEWUSER) == EPERM
    assert seccomp.evaluate(program, token, clone, CLONE_NEWNS) == EPERM
    assert seccomp.evaluate(program, token, seccomp.CLONE3[arch], 0) == ENOSYS


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_vsock_sockets_are_refused_and_other_families_pass(arch: str) -> None:
    program = seccomp.build(arch)
    token = seccomp.AUDIT_ARCH[arch]
    for call in seccomp.SOCKET_CALLS[arch]:
        assert seccomp.evaluate(program, token, call, seccomp.AF_VSOCK) == EAFNOSUPPORT
        assert seccomp.evaluate(program, token, call, 0xFFFFFFFF_00000000 | seccomp.AF_VSOCK) == EAFNOSUPPORT  # int argument
        for family in (AF_UNIX, AF_INET, AF_NETLINK):
            assert seccomp.evaluate(program, token, call, family) == seccomp.RET_ALLOW


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_io_uring_is_refused(arch: str) -> None:
    program = seccomp.build(arch)
    for nr in (425, 426, 427):
        assert seccomp.evaluate(program, seccomp.AUDIT_ARCH[arch], nr) == EPERM


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_another_architecture_is_killed(arch: str) -> None:
    program = seccomp.build(arch)
    for other in (0x40000003, 0x40000028, *(t for a, t in seccomp.AUDIT_ARCH.items() if a != arch)):  # i386, arm
        assert seccomp.evaluate(program, other, 0) == seccomp.RET_KILL_PROCESS


def test_x32_calls_are_killed_on_x86_64() -> None:
    program = seccomp.build("x86_64")
    assert seccomp.evaluate(program, seccomp.AUDIT_ARCH["x86_64"], seccomp.X32_SYSCALL_BIT | 165) == seccomp.RET_KILL_PROCESS


def test_numbers_match_the_kernel_headers_of_this_machine() -> None:
    """Debian's linux-libc-dev headers are the kernel's tables; both are read where installed."""
    headers = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), "aarch64": Path("/usr/include/asm-generic/unistd.h")}
    checked = 0
    for arch, header in headers.items():
        if not header.exists():
            continue
        table = {m[1]: int(m[2]) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())}
        numbers = {**seccomp.denied_numbers(arch), "clone": seccomp.CLONE[arch], "clone3": seccomp.CLONE3[arch]}
        numbers.update(zip(("socket", "socketpair"), seccomp.SOCKET_CALLS[arch], strict=True))
        for name, nr in numbers.items():
            assert table[name] == nr, (arch, name)
        checked += 1
    assert checked >= 1, "no kernel syscall header found (Debian: linux-libc-dev)"


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(ValueError, match="riscv64"):
        seccomp.build("riscv64")

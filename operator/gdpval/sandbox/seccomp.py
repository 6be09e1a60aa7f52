"""The seccomp filter of local sandboxes, written as classic BPF by hand (no libseccomp needed).

bubblewrap loads it with `--seccomp FD` after it has built the sandbox, so it binds the tool server
and every command. It refuses (EPERM) what workplace tasks never need and an escape always does:
mounting, ptrace and reading other processes' memory, taking another process's descriptors,
BPF, keyrings, perf events, kernel modules, new namespaces, io_uring (its own path into the kernel,
which seccomp cannot see through; containerd's and Docker's default profiles refuse it too). `clone3`
answers ENOSYS, because its flags sit in memory a filter cannot read; glibc then falls back to
`clone`, whose flags are checked. Sockets of the AF_VSOCK family answer EAFNOSUPPORT, as on a kernel
without vsock: they reach the hypervisor and other VMs whatever the network namespace.
A call made under another architecture's ABI (i386 or x32 on x86_64, arm32 on aarch64) kills the
process: the numbers below would not mean the same calls there.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # little endian on both architectures

BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# Namespace flags of clone(2): CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
# (CLONE_NEWTIME, 0x80, overlaps clone's exit-signal byte and only exists for unshare and clone3.)
CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# name: (x86_64, aarch64), from arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
DENIED: dict[str, tuple[int | None, int | None]] = {
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "quotactl": (179, 60),
    "acct": (163, 89),
    "reboot": (169, 142),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "kcmp": (312, 272),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "unshare": (272, 97),
    "setns": (308, 268),
    "userfaultfd": (323, 282),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "fanotify_init": (300, 262),
    "lookup_dcookie": (212, 18),
    "syslog": (103, 116),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "vhangup": (153, 58),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "iopl": (172, None),
    "ioperm": (173, None),
}
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = {"x86_64": 435, "aarch64": 435}
SOCKET_CALLS = {"x86_64": (41, 53), "aarch64": (198, 199)}  # socket, socketpair: the family is argument 0
AF_VSOCK = 40


def host_arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def denied_numbers(arch: str) -> dict[str, int]:
    """The refused syscalls of `arch` by name (calls the architecture lacks are left out)."""
    column = ("x86_64", "aarch64").index(arch)
    return {name: nr for name, nrs in DENIED.items() if (nr := nrs[column]) is not None}


Insn = tuple[int, int, int, int]
Jump = int | str  # a relative offset, or a label (resolved by _assemble)
Line = tuple[int, Jump, Jump, int] | str  # an instruction, or a label naming the next one


def _insn(code: int, k: int, jt: Jump = 0, jf: Jump = 0) -> tuple[int, Jump, Jump, int]:
    return code, jt, jf, k


def _assemble(lines: list[Line], returns: dict[str, int]) -> list[Insn]:
    """`lines`, then one labelled return per entry of `returns`; each jump to a label becomes its offset
    (classic BPF only jumps forward, at most 255 instructions)."""
    lines = lines + [item for label, action in returns.items() for item in (label, _insn(BPF_RET_K, action))]
    at: dict[str, int] = {}
    body: list[tuple[int, Jump, Jump, int]] = []
    for line in lines:
        if isinstance(line, str):
            at[line] = len(body)
        else:
            body.append(line)
    program = []
    for pc, (code, jt, jf, k) in enumerate(body):
        offsets = [at[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf)]
        if not all(0 <= offset <= 255 for offset in offsets):
            raise ValueError(f"jump out of range at instruction {pc}")
        program.append((code, offsets[0], offsets[1], k))
    return program


def instructions(arch: str) -> list[Insn]:
    """The program as (code, jt, jf, k) tuples; `build` packs them for the kernel."""
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for architecture {arch!r}")
    body: list[Line] = [
        _insn(BPF_LD_W_ABS, OFFSET_ARCH),
        _insn(BPF_JEQ_K, AUDIT_ARCH[arch], jf="kill"),
        _insn(BPF_LD_W_ABS, OFFSET_NR),
    ]
    if arch == "x86_64":
        body.append(_insn(BPF_JGE_K, X32_SYSCALL_BIT, jt="kill"))
    body += [_insn(BPF_JEQ_K, nr, jt="eperm") for nr in sorted(set(denied_numbers(arch).values()))]
    body += [_insn(BPF_JEQ_K, CLONE3[arch], jt="enosys")]
    body += [_insn(BPF_JEQ_K, nr, jt="family") for nr in SOCKET_CALLS[arch]]
    body += [
        _insn(BPF_JEQ_K, CLONE[arch], jf="allow"),
        _insn(BPF_LD_W_ABS, OFFSET_ARG0_LOW),
        _insn(BPF_JSET_K, CLONE_NAMESPACE_FLAGS, jt="eperm", jf="allow"),
    ]
    body += ["family", _insn(BPF_LD_W_ABS, OFFSET_ARG0_LOW), _insn(BPF_JEQ_K, AF_VSOCK, jt="eafnosupport", jf="allow")]
    returns = {
        "kill": RET_KILL_PROCESS,
        "enosys": RET_ERRNO | errno.ENOSYS,
        "eafnosupport": RET_ERRNO | errno.EAFNOSUPPORT,
        "eperm": RET_ERRNO | errno.EPERM,
        "allow": RET_ALLOW,
    }
    return _assemble(body, returns)


def build(arch: str | None = None) -> bytes:
    """The filter as an array of struct sock_filter, as `bwrap --seccomp FD` reads it."""
    return b"".join(struct.pack("=HBBI", *insn) for insn in instructions(arch or host_arch()))


def decode(program: bytes) -> list[Insn]:
    """Unpack a built program back into (code, jt, jf, k) tuples."""
    return [struct.unpack_from("=HBBI", program, offset) for offset in range(0, len(program), 8)]


def evaluate(program: bytes, arch_token: int, nr: int, arg0: int = 0) -> int:
    """Run a built program on one syscall the way the kernel does; the action it returns."""
    data = struct.pack("=iIQ6Q", nr, arch_token, 0, arg0, 0, 0, 0, 0, 0)
    insns = decode(program)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == BPF_LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == BPF_RET_K:
            return k
        elif code in (BPF_JEQ_K, BPF_JGE_K, BPF_JSET_K):
            taken = acc == k if code == BPF_JEQ_K else acc >= k if code == BPF_JGE_K else bool(acc & k)
            pc += 1 + (jt if taken else jf)
        else:
            raise ValueError(f"unexpected BPF instruction {code:#x} at {pc}")

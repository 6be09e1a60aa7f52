"""Escapes a hostile model tried through `gdpval run`, each replayed by the scripted model as root and as
uid 65534: every one is refused, the host is unchanged, and no credential of the runner reaches the model,
a transcript, the results or the submission."""

from __future__ import annotations

import errno
import hashlib
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import gdpval
from support.attacks import CANARIES, NOBODY, REFERENCE

USERS = pytest.mark.parametrize("uid", [0, NOBODY], ids=["root", "nonroot"])
PERMISSION = ("must be superuser", "Operation not permitted", "Permission denied", "EPERM", "Read-only file system")

RELEASE_AGENT = """mkdir -p /tmp/cg && mount -t cgroup -o memory cgroup /tmp/cg; echo mount=$?
mkdir -p /tmp/cg/x && echo 1 > /tmp/cg/x/notify_on_release; echo notify=$?
printf '#!/bin/sh\\ncat /proc/*/environ > /workspace/deliverable_files/env.txt\\n' > /tmp/agent.sh; chmod +x /tmp/agent.sh
echo /tmp/agent.sh > /tmp/cg/release_agent; echo agent=$?
sh -c 'echo $$ > /tmp/cg/x/cgroup.procs'; sleep 0.5; cat /workspace/deliverable_files/env.txt 2>&1 | head -c 300"""

REMOUNT_USR = "mount -o remount,bind,rw /usr; echo remount=$?; touch /usr/{marker}; echo touch=$?"

HOST_DISK = """mknod /tmp/disk b $(stat -c '%d' / | awk '{{print int($1/256)" "$1%256}}') ; echo mknod=$?
mkdir -p /tmp/m && mount /tmp/disk /tmp/m; echo mount=$?; touch /tmp/m/{marker}; echo touch=$?"""

APPEND_REFERENCE = """f=$(ls /reference_files/*/* | head -1); echo "pwned" >> "$f"; echo append=$?
mount -o remount,rw "$f"; echo remount=$?; echo "pwned" >> "$f"; echo append2=$?"""

PIDFD_GETFD = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
server = [p for p in os.listdir('/proc') if p.isdigit() and b'toolserver' in open(f'/proc/{p}/cmdline', 'rb').read()]
print('servers', server)
for pid in server:
    pidfd = libc.syscall(434, int(pid), 0)
    print('pidfd_open', pidfd, os.strerror(ctypes.get_errno()))
    for fd in range(0, 12):
        got = libc.syscall(438, pidfd, fd, 0)
        if got >= 0:
            print('GOT', fd, os.readlink(f'/proc/self/fd/{got}'))
    print('getfd_errno', os.strerror(ctypes.get_errno()))
    print('ptrace', libc.ptrace(16, int(pid), 0, 0), os.strerror(ctypes.get_errno()))
"""

VSOCK_AND_IO_URING = """import ctypes, os, socket
for name, make in (("vsock", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)), ("vsockpair", lambda: socket.socketpair(socket.AF_VSOCK))):
    try:
        make()
        print(name, "opened")
    except OSError as exc:
        print(name, exc.errno)
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
ring = libc.syscall(425, 4, params)
print("io_uring_setup", ring, ctypes.get_errno())
print("io_uring_enter", libc.syscall(426, max(ring, 0), 0, 0, 0, None, 0), ctypes.get_errno())
"""

HOST_NETWORK = """import socket
def attempt(name, family, kind, address):
    try:
        with socket.socket(family, kind) as sock:
            sock.settimeout(3)
            sock.connect(address)
        print(name, "connected")
    except OSError as exc:
        print(name, exc.errno)
attempt("loopback", socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", {port}))
attempt("abstract", socket.AF_UNIX, socket.SOCK_STREAM, "\\0{abstract}")
attempt("metadata", socket.AF_INET, socket.SOCK_DGRAM, ("169.254.169.254", 80))
gateway = [line.split()[2] for line in open("/proc/net/route").read().splitlines()[1:] if line.split()[1] == "00000000"]
attempt("gateway", socket.AF_INET, socket.SOCK_STREAM, (socket.inet_ntoa(bytes.fromhex(gateway[0])[::-1]), {port}))
"""

ENVIRON = "env; cat /proc/1/environ; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done 2>/dev/null; cat /proc/$PPID/environ; echo done"


def release_agents() -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in Path("/sys/fs/cgroup").glob("*/release_agent")}


def assert_no_credentials(run) -> None:
    everything = run.all_bytes()
    for name, value in CANARIES.items():
        assert value.encode() not in everything, f"{name} leaked"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@USERS
def test_cgroup_release_agent(run_script, uid: int) -> None:
    before = release_agents()
    run = run_script([{"bash": RELEASE_AGENT}], uid)
    assert run.returncode == 0, run.stderr
    (out,) = run.tool_results()
    assert "mount=32" in out and any(word in out for word in PERMISSION), out
    assert release_agents() == before
    assert_no_credentials(run)


@USERS
def test_remount_usr_read_write(run_script, uid: int) -> None:
    marker = f"gdpval-sec-{secrets.token_hex(4)}"
    run = run_script([{"bash": REMOUNT_USR.format(marker=marker)}], uid)
    (out,) = run.tool_results()
    assert "remount=32" in out and "touch=1" in out, out
    assert not Path("/usr", marker).exists()
    assert_no_credentials(run)


@USERS
def test_mknod_and_mount_the_host_disk(run_script, uid: int) -> None:
    marker = f"gdpval-sec-{secrets.token_hex(4)}"
    run = run_script([{"bash": HOST_DISK.format(marker=marker)}], uid)
    (out,) = run.tool_results()
    assert "mknod=1" in out and "mount=32" in out, out
    assert not Path("/", marker).exists()
    assert_no_credentials(run)


@USERS
def test_append_to_a_read_only_reference(run_script, attack_dataset: Path, uid: int) -> None:
    before = sha(attack_dataset / REFERENCE)
    run = run_script([{"bash": APPEND_REFERENCE}], uid)
    (out,) = run.tool_results()
    assert "append=1" in out and "remount=32" in out and "append2=1" in out, out
    assert sha(attack_dataset / REFERENCE) == before
    assert_no_credentials(run)


@USERS
def test_pidfd_getfd_and_ptrace_on_the_tool_server(run_script, uid: int) -> None:
    run = run_script([{"python_exec": PIDFD_GETFD}], uid)
    (out,) = run.tool_results()
    assert "servers ['" in out and "GOT" not in out, out
    assert "getfd_errno Operation not permitted" in out and "ptrace -1 Operation not permitted" in out, out
    assert_no_credentials(run)


@USERS
def test_vsock_and_io_uring_are_refused_with_the_network_off(run_script, uid: int) -> None:
    """AF_VSOCK reaches the hypervisor whatever the network namespace; io_uring is a syscall path seccomp cannot see into."""
    run = run_script([{"python_exec": VSOCK_AND_IO_URING}], uid)
    (out,) = run.tool_results()
    assert f"vsock {errno.EAFNOSUPPORT}" in out and f"vsockpair {errno.EAFNOSUPPORT}" in out, out
    assert f"io_uring_setup -1 {errno.EPERM}" in out and f"io_uring_enter -1 {errno.EPERM}" in out, out
    assert_no_credentials(run)


@pytest.fixture
def host_services() -> Iterator[tuple[int, str]]:
    """A TCP service on the host's 127.0.0.1 and an abstract unix socket in its network namespace."""
    abstract = f"gdpval-sec-{secrets.token_hex(4)}"
    with socket.socket() as tcp, socket.socket(socket.AF_UNIX) as unix:
        tcp.bind(("127.0.0.1", 0))
        unix.bind("\0" + abstract)
        tcp.listen(8)
        unix.listen(8)
        yield tcp.getsockname()[1], abstract


@USERS
def test_network_on_keeps_the_hosts_loopback_and_link_local_out(run_script, host_services: tuple[int, str], uid: int) -> None:
    """With --network the sandbox has a namespace of its own: its 127.0.0.1 is its own, the host's abstract sockets and the
    gateway-to-host mapping are gone, and link-local (cloud metadata) has no route; UDP connect sends nothing."""
    port, abstract = host_services
    run = run_script([{"python_exec": HOST_NETWORK.format(port=port, abstract=abstract)}], uid, "--network")
    assert run.returncode == 0, run.stderr
    (out,) = run.tool_results()
    assert f"loopback {errno.ECONNREFUSED}" in out and f"abstract {errno.ECONNREFUSED}" in out, out
    assert f"metadata {errno.EHOSTUNREACH}" in out and "gateway connected" not in out, out
    assert_no_credentials(run)


@USERS
def test_mountinfo_names_no_host_path_of_ours(run_script, attack_dataset: Path, uid: int) -> None:
    """The mount roots the sandbox sees are its own folders: not the checkout (the tool server), the dataset folder (the
    references), the runner's home or caches."""
    run = run_script([{"bash": "cat /proc/self/mountinfo"}], uid)
    (out,) = run.tool_results()
    assert "/opt/gdpval/toolserver.py" in out and "/reference_files/" in out, out
    checkout = Path(gdpval.__file__).resolve().parents[2]
    for host in (checkout, attack_dataset, run.output.parent / "home", Path.home()):
        assert str(host) not in out, (host, out)
    assert "/.cache/" not in out, out
    assert_no_credentials(run)


@pytest.fixture(scope="module")
def small_runtime(shared_root: Path) -> Path:
    """An unpacked root of the host's own files, hard-linked (the same file system as /usr): what the sandbox needs
    to run its tool server and bash, in a folder whose path the sandbox must not see."""
    root = shared_root / "runtime-of-ours"
    for folder in ("usr/bin", "usr/lib/python3.11", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc"):
        (root / folder).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", f"/{folder}", str(root / folder)], check=True)
    for link in ("bin", "lib", "lib64"):
        (root / link).symlink_to(f"usr/{link}")
    return root


def test_mountinfo_names_no_runtime_folder(run_script, small_runtime: Path) -> None:
    """A root runner's runtime is layered, not bound: the mount roots of /usr and /etc do not name its folder
    (a non-root runner's sandbox still binds it: README, Local runtime)."""
    run = run_script([{"bash": "cat /proc/self/mountinfo; ls /usr/bin/python3"}], 0, "--sandbox-runtime", str(small_runtime))
    assert run.returncode == 0, run.stderr
    (out,) = run.tool_results()
    assert " /usr " in out and "/usr/bin/python3" in out, out
    assert str(small_runtime) not in out and "runtime-of-ours" not in out, out


@USERS
def test_environment_and_proc_environ_carry_no_credentials(run_script, uid: int) -> None:
    run = run_script([{"bash": ENVIRON}], uid)
    (out,) = run.tool_results()
    assert out.rstrip().endswith("[exit code 0]") and "PATH=" in out, out
    assert "GDPVAL_SANDBOX_TOKEN" not in out
    assert_no_credentials(run)


def test_the_leak_check_sees_what_the_model_reads(run_script) -> None:
    """Guards the suite itself: a canary the model echoes is found in the tool result and the transcript."""
    canary = CANARIES["OPENAI_API_KEY"]
    run = run_script([{"bash": f"echo {canary[:8]}''{canary[8:]}"}], 0)
    assert canary in run.tool_results()[0] and canary.encode() in run.all_bytes()

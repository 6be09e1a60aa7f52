"""How a sandbox's server is launched: bubblewrap's namespaces, pasta's network, and a root runner's drop to an unprivileged uid.

As root, bubblewrap's user namespace would map the sandbox's uid to host root: all capabilities
are dropped, but plain file permissions would let a command read root-only files such as
/etc/shadow. So a root runner's sandboxes run as an unprivileged host uid and gid instead
(GDPVAL_SANDBOX_UID, `uid` or `uid:gid`, default 65533): setpriv drops to it and execs bubblewrap.

With the network on, the sandbox still has its own network namespace: pasta (Debian package passt)
creates it, gives it a copy of the host's IPv4 address and routes, and carries its connections out
through sockets of its own on the host, as user-mode NAT. Nothing of the host's network namespace is
in reach: its 127.0.0.1 and abstract unix sockets stay the host's (pasta's mapping of the gateway to
the host's loopback and its port forwards are off), and link-local addresses (cloud metadata
services) are unreachable. IPv6 is not offered: its link-local and metadata ranges would need more.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess

from gdpval.errors import GdpvalError
from gdpval.sandbox import seccomp
from gdpval.sandbox.limits import Limits, MemoryFilesystems
from gdpval.sandbox.process import signal_group
from gdpval.sandbox.runtime import Runtime, root_binds

BWRAP = "/usr/bin/bwrap"
SETPRIV = "/usr/bin/setpriv"
PASTA = "/usr/bin/pasta"
IP = "/usr/sbin/ip"
CLOSED_RANGES = ("169.254.0.0/16",)  # link-local: cloud metadata services; the host's loopback is never routed to
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_UID = 1000  # who commands run as inside; on the host, the runner's uid, or a root runner's sandbox owner
OWNER_ENV = "GDPVAL_SANDBOX_UID"
DEFAULT_OWNER = 65533  # Debian reserves 65000-65533 and systemd allocates none of 65520-65533: no account has it


class SandboxOwnerError(GdpvalError):
    """GDPVAL_SANDBOX_UID does not name an unprivileged uid (and gid)."""


def parse_owner(text: str) -> tuple[int, int]:
    """The host uid and gid `uid` or `uid:gid` names; root and the kernel's reserved -1 and -2 are refused."""
    parts = text.strip().split(":")
    ids = [int(part) for part in parts if part.isdigit()]
    if len(ids) != len(parts) or len(ids) not in (1, 2) or not all(0 < i < 2**32 - 2 for i in ids):
        raise SandboxOwnerError(f"{OWNER_ENV}={text!r}: give `uid` or `uid:gid` of an unprivileged, unused account (default {DEFAULT_OWNER})")
    return ids[0], ids[-1]


def sandbox_owner() -> tuple[int, int] | None:
    """The host uid and gid a root runner's sandboxes drop to; None for a non-root runner (its own uid is unprivileged)."""
    if os.geteuid() != 0:
        return None
    return parse_owner(os.environ.get(OWNER_ENV) or str(DEFAULT_OWNER))


def dropping(argv: list[str], owner: tuple[int, int] | None) -> list[str]:
    """`argv` run as `owner` (uid, gid, no supplementary groups) when given: setpriv is run by root, not setuid."""
    if owner is None:
        return argv
    uid, gid = owner
    return [SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def namespace_args(network: bool, seccomp_fd: int | None, sizes: MemoryFilesystems | None, system: Runtime, root: str | None = None) -> list[str]:
    """Namespaces and privileges: a user namespace whose one uid maps to the uid bubblewrap runs as
    (the runner's, or a root runner's sandbox owner), so the sandbox holds no capability on the host; no capability inside it
    either, no further user namespaces, the seccomp filter read from `seccomp_fd`, and a /tmp and
    /dev/shm of `sizes`. The server is PID 1 of the pid namespace, which its commands cannot
    kill (see toolserver.py). Without a filter (benchmarks only) none of that hardening is applied. The system
    folders come read-only from `system` (the host's, or an unpacked image's, found at `root` if given)."""
    args = ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--die-with-parent"]
    if seccomp_fd is not None:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--cap-drop", "ALL"]
        args += ["--unshare-cgroup", "--seccomp", str(seccomp_fd)]
    if not network:
        args.append("--unshare-net")
    tmp, shm = (["--size", str(size)] for size in (sizes.tmp, sizes.shm)) if sizes is not None else ([], [])
    return args + root_binds(system, root) + ["--proc", "/proc", "--dev", "/dev", *tmp, "--tmpfs", "/tmp", *shm, "--tmpfs", "/dev/shm"]


def networked(argv: list[str]) -> list[str]:
    """`argv` in a network namespace of its own behind pasta's user-mode NAT (IPv4 only), with the
    link-local range unreachable: pasta's user namespace lets the route be set before `argv` runs."""
    pasta = [PASTA, "--config-net", "--foreground", "--quiet", "--ipv4-only", "--no-map-gw"]
    pasta += ["--tcp-ports", "none", "--udp-ports", "none", "--tcp-ns", "none", "--udp-ns", "none"]
    routes = " && ".join(f"{IP} route add unreachable {cidr}" for cidr in CLOSED_RANGES)
    return [*pasta, "--", "/bin/sh", "-c", f'{routes} && exec "$@"', "sh", *argv]


@functools.cache
def network_status() -> tuple[bool, str]:
    """Whether a sandbox can have the network in a namespace of its own here (a trial runs `true`), and why not."""
    for path, package in ((PASTA, "passt"), (IP, "iproute2")):
        if not os.access(path, os.X_OK):
            return False, f"{path} not found (Debian package: {package})"
    argv = dropping(networked(["/usr/bin/true"]), sandbox_owner())
    try:
        proc = subprocess.Popen(
            argv, env={"PATH": CLEAN_PATH}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        return False, f"trial pasta namespace failed: {exc}"
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    signal_group(proc.pid, signal.SIGKILL)  # a pasta that failed leaves a forked helper behind, holding stderr
    assert proc.stderr is not None
    with proc.stderr:
        stderr = proc.stderr.read().decode(errors="replace")
    if proc.wait() != 0:
        said = " ".join(line for line in stderr.splitlines() if "syslog" not in line).strip()
        hint = " (/dev/net/tun must be usable by every user, mode 0666 as Debian's udev sets it)" if "tun" in said else ""
        return False, f"trial pasta namespace failed: {said or proc.returncode}{hint}"
    return True, "pasta works"


def pipe_holding(data: bytes) -> int:
    """A pipe's read end holding `data` then end of file (a few hundred bytes: within a pipe's buffer)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)
    finally:
        os.close(write_end)
    return read_end


@functools.cache
def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap really works here (a trial sandbox runs `true`), and why not."""
    if not os.access(BWRAP, os.X_OK):
        return False, f"{BWRAP} not found (Debian package: bubblewrap)"
    if os.geteuid() == 0 and not os.access(SETPRIV, os.X_OK):
        return False, f"{SETPRIV} not found (Debian package: util-linux), needed to drop root for sandboxes"
    try:
        filter_fd = pipe_holding(seccomp.build())
    except ValueError as exc:
        return False, str(exc)
    sizes = Limits.of().filesystems(workspace_in_memory=False)
    argv = [BWRAP, *namespace_args(False, filter_fd, sizes, Runtime()), "--remount-ro", "/", "--", "/usr/bin/true"]
    argv = dropping(argv, sandbox_owner())
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=15, env={"PATH": CLEAN_PATH}, pass_fds=(filter_fd,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"trial bubblewrap sandbox failed: {exc}"
    finally:
        os.close(filter_fd)
    if proc.returncode != 0:
        return False, f"trial bubblewrap sandbox failed: {proc.stderr.strip() or proc.returncode}"
    return True, "bubblewrap works"

"""A sandbox's processes on the host: found by the marker in their environment, signalled, killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gdpval.sandbox.client import SandboxUnavailable

MARKER_ENV = "GDPVAL_SANDBOX_ID"
STOP_GRACE_S = 3.0


def marked_pids(marker: bytes) -> list[int]:
    """Host pids whose environment carries this sandbox's marker."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def server_pid(marker: bytes, child_pid: int) -> int:
    """The host pid of a sandbox's server: PID 1 of its pid namespace, `child_pid` in the one above (which
    bubblewrap's --info-fd names: with the network on, pasta puts bubblewrap in a pid namespace of its own),
    and a child of this sandbox's bubblewrap (the server's own environment is unreadable: it is not dumpable)."""
    marked = {str(pid) for pid in marked_pids(marker)}
    for entry in os.listdir("/proc"):
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{entry}/status").read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if status.get("NSpid", "").split()[-2:] == [str(child_pid), "1"] and status.get("PPid", "").strip() in marked:
            return int(entry)
    raise SandboxUnavailable(f"the tool server (pid {child_pid} in bubblewrap's namespace) is gone")


def kill_marked(marker: bytes) -> None:
    """Kill leftovers that left our process group (new sessions) but kept the marker."""
    deadline = time.monotonic() + STOP_GRACE_S
    while (pids := marked_pids(marker)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass

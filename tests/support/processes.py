"""Small helpers for tests that start servers of their own: a free loopback port, and a stop that
does not hang on a process that ignores SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace` seconds; always reaped."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def interruptible() -> None:
    """A child's `preexec_fn`: Ctrl-C's default action back. A suite started as a background job of a
    non-interactive shell inherits SIGINT ignored, and a Python started so keeps ignoring it, so a test
    of what SIGINT does would see nothing happen."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

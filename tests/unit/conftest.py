"""The unit tier touches no server and starts no subprocess: every unit test runs with process
starts and network connections refused, so a test that needs either fails here and belongs in
tests/integration. (A socket may still be made and bound: a Unix socket file is a file type.)"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest


class UnitTierViolation(AssertionError):
    """A unit test started a process or used the network."""


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise UnitTierViolation(f"a unit test may not {what}: move it to tests/integration")

    return refused


@pytest.fixture(autouse=True)
def _no_processes_or_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("start a subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"call os.{name}"))
    for name in ("connect", "connect_ex", "listen"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"call socket.{name} (a server or a client)"))

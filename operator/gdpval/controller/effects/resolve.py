"""Endpoint names to addresses, for the NetworkPolicy builder (a policy matches addresses, never names)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

Resolver = Callable[[Iterable[str]], tuple[dict[str, list[str]], list[str]]]


def resolve_hosts(hosts: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The addresses of each host this operator's resolver finds, and the hosts it could not resolve."""
    found: dict[str, list[str]] = {}
    missing: list[str] = []
    for host in hosts:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            missing.append(host)
            continue
        found[host] = sorted({str(info[4][0]).split("%", 1)[0] for info in infos})
    return found, missing

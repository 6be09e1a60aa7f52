"""A pool pod's agent before and at its claim: wait ready for it, then take on the claiming run's settings.

Until the claim the pod holds nothing of any run; the claim's annotation (contract.Claim) and its Secret arrive in
one projected folder, the Secret's files a moment after the annotation at worst: the agent waits for the Secret's
claim id to equal the claim's, so it never runs with the credentials of nobody or of an earlier claim.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdpval import contract
from gdpval.errors import GdpvalError

CLAIM_POLL_S = 0.02  # a stat and a small read, as the go file's
CLAIM_SECRET_TIMEOUT_S = 120.0  # the kubelet's periodic sync brings a late Secret within about a minute


def read_signal(path: Path) -> str:
    """A downward-API or Secret file the operator fills, stripped; empty while it is absent."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


def wait_for_claim(folder: Path, ready: Path, poll: float = CLAIM_POLL_S, secret_timeout: float = CLAIM_SECRET_TIMEOUT_S) -> contract.Claim:
    """Say the agent waits ready (`ready`, the startup probe's file), then wait for a claim and its Secret."""
    ready.touch()
    while not (text := read_signal(folder / Path(contract.CLAIM_FILE).name)):
        time.sleep(poll)
    try:
        claim = contract.Claim.parse(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise GdpvalError(f"unreadable claim in {folder}: {exc}") from None
    until = time.monotonic() + secret_timeout
    while read_signal(folder / contract.CLAIM_ID_KEY) != claim.id:
        if time.monotonic() > until:
            raise GdpvalError(f"the Secret of claim {claim.id} did not reach {folder} within {secret_timeout:.0f} s")
        time.sleep(poll)
    return claim


def take_on(claim: contract.Claim, folder: Path, environ: Any = os.environ) -> None:
    """The run's credentials (files of the claim Secret) and settings into the agent's environment."""
    for key in (contract.API_KEY_ENV, *contract.S3_KEY_ENVS):
        value = read_signal(folder / key)
        if value:
            environ[key] = value
    if claim.endpoint:
        environ["AWS_ENDPOINT_URL"] = claim.endpoint
    environ["AWS_REGION"] = claim.region
    environ[contract.OUTAGE_HOLD_ENV] = str(claim.outage_hold)
    if claim.hosts:
        pin_hosts(claim.hosts)


def pin_hosts(hosts: Mapping[str, list[str]]) -> None:
    """Resolve the run's endpoint names to the addresses its NetworkPolicy opens: a network-off pod has no DNS, and a
    pooled pod's /etc/hosts was written before any run was known. Other names resolve as before (to nothing)."""
    original = socket.getaddrinfo
    pinned = {host.lower(): list(addresses) for host, addresses in hosts.items()}

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        addresses = pinned.get(str(name).lower()) if name else None
        if not addresses:
            return original(host, *args, **kwargs)
        return [info for address in addresses for info in original(address, *args, **kwargs)]

    socket.getaddrinfo = getaddrinfo

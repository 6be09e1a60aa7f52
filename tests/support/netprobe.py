"""TCP probes from inside a pod, the scripted model's control endpoint, and the bystander pod: what the
NetworkPolicy tests of tests/cluster use to see what a pod reaches.

Each probe is a TCP connect from inside a pod (`kubectl exec`): `open`, `refused` (kube-router
REJECTs what a policy denies) or `blocked` (no answer: the host drops anything bound off the
machine)."""

from __future__ import annotations

import json
import urllib.request
from urllib.parse import urlsplit

from support.operator import Kube

BYSTANDER_PORT = 8080
METADATA = ("169.254.169.254", 80)
PROBE_TIMEOUT = 3.0
ENFORCE_TIMEOUT = 60

# Prints one JSON object: "host:port" -> open | refused | blocked.
PROBE = """
import json, socket, sys
out = {}
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=float(sys.argv[1])).close()
        out[target] = "open"
    except ConnectionRefusedError:
        out[target] = "refused"
    except OSError:
        out[target] = "blocked"
print(json.dumps(out))
"""

# A listener that accepts and closes each connection: the TCP handshake is all a probe needs. It must
# accept: a connection never accepted stays in the listen backlog, and once the kubelet's readiness
# probe (one a second) has filled it, every new connection times out.
LISTEN = f"import socket\ns = socket.create_server(('0.0.0.0', {BYSTANDER_PORT}))\nwhile True:\n    s.accept()[0].close()"

RESTRICTED_CONTAINER = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
}


def addr(target: tuple[str, int]) -> str:
    return f"{target[0]}:{target[1]}"


def probe(kube: Kube, pod: str, container: str, *targets: tuple[str, int]) -> dict[str, str]:
    """What a TCP connect from inside `pod` gets for each target."""
    done = kube.run("exec", pod, "-c", container, "--", "python3", "-c", PROBE, str(PROBE_TIMEOUT), *map(addr, targets), timeout=60)
    return json.loads(done.stdout)


def model_control(model_url: str, action: str, body: dict | None = None) -> dict:
    """The scripted model's /fake/ control endpoint (hold, release, stats)."""
    parts = urlsplit(model_url)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/fake/{action}", data=data, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=10) as reply:
        return json.loads(reply.read() or b"{}")


def endpoint(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    return parts.hostname, parts.port

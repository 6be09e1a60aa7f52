"""What a run's sample pods may reach: the model's and S3's endpoints, their addresses, and DNS or none.

The NetworkPolicy matches addresses only, so the controller resolves the endpoints' names first; where
it can, a network-off pod gets those names in /etc/hosts and no resolver, so DNS is no channel out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gdpval.api.v1alpha1 import GdpvalRunSpec

# Cloud metadata services (instance credentials) answer on link-local addresses: no sample pod
# reaches them, whatever spec.sandbox.network says.
METADATA_BLOCKS = {"0.0.0.0/0": ["169.254.0.0/16"], "::/0": ["fe80::/10", "fd00:ec2::254/128"]}
# A network-off pod whose endpoints are all pinned in /etc/hosts has no DNS: its policy opens no
# resolver, and its resolv.conf names one that answers nothing (the API requires one).
NO_RESOLVER = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """A server a network-off sample pod must reach: the model or S3."""

    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        return cls(parts.hostname or "", parts.port or (80 if parts.scheme == "http" else 443))

    @property
    def address(self) -> str | None:
        """The host itself when the URL names an IP address (nothing to resolve)."""
        try:
            return str(ipaddress.ip_address(self.host))
        except ValueError:
            return None


def endpoints(spec: GdpvalRunSpec) -> list[Endpoint]:
    """The model's and S3's endpoints, with the defaults the pods use when the spec names none."""
    return [Endpoint.of(spec.model.base_url or "https://api.openai.com/v1"), Endpoint.of(spec.output.endpoint or "https://s3.amazonaws.com")]


def hosts_to_resolve(spec: GdpvalRunSpec) -> list[str]:
    """Endpoint host names the controller resolves before it builds the NetworkPolicy (a policy matches addresses only)."""
    return sorted({e.host for e in endpoints(spec) if e.address is None})


def pinned_hosts(spec: GdpvalRunSpec, resolved: Mapping[str, list[str]] | None) -> dict[str, list[str]] | None:
    """The host names a network-off sample pod needs with their addresses, for its /etc/hosts, so that it needs
    no DNS, which the model's commands (sharing the pod's network with the agent) could otherwise use as a
    channel out. None where DNS must stay: the network on, egress the run opens itself (spec.sandbox.allowedEgress,
    which may be by name), S3 left to AWS's defaults (its bucket names are virtual hosts), a name that did not resolve."""
    if spec.sandbox.network or spec.sandbox.allowed_egress or not spec.output.endpoint or resolved is None:
        return None
    hosts = hosts_to_resolve(spec)
    if not all(resolved.get(host) for host in hosts):
        return None
    return {host: sorted(set(resolved[host])) for host in hosts}


def _endpoint_rule(endpoint: Endpoint, resolved: Mapping[str, list[str]]) -> dict[str, Any] | None:
    """Egress to one endpoint's addresses on its port; None when its name did not resolve (nothing is opened)."""
    addresses = [endpoint.address] if endpoint.address else resolved.get(endpoint.host, [])
    if not addresses:
        return None
    blocks = [{"ipBlock": {"cidr": f"{ip}/{ipaddress.ip_address(ip).max_prefixlen}"}} for ip in sorted(set(addresses))]
    return {"to": blocks, "ports": [{"protocol": "TCP", "port": endpoint.port}]}


def egress(spec: GdpvalRunSpec, resolved: Mapping[str, list[str]] | None) -> list[dict[str, Any]]:
    """What a run's sample pods may reach. Network off: the model and the S3 endpoint by address and port (the
    agent shares the pod's network with the sandbox), DNS unless the pods pin those names (pinned_hosts), plus
    spec.sandbox.allowedEgress. Network on: anywhere except the link-local metadata addresses."""
    if spec.sandbox.network:
        return [{"to": [{"ipBlock": {"cidr": cidr, "except": out}} for cidr, out in METADATA_BLOCKS.items()]}]
    dns = {
        "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    rules = [_endpoint_rule(e, resolved or {}) for e in endpoints(spec)]
    resolver = [] if pinned_hosts(spec, resolved or {}) is not None else [dns]
    return [*resolver, *(r for r in rules if r), *spec.sandbox.allowed_egress]


def pod_dns(spec: GdpvalRunSpec, resolved: Mapping[str, list[str]] | None) -> dict[str, Any]:
    """A sample pod's /etc/hosts and resolver where its endpoints are pinned (see pinned_hosts): no DNS server at all."""
    pinned = pinned_hosts(spec, resolved)
    if pinned is None:
        return {}
    by_address: dict[str, list[str]] = {}
    for host, addresses in sorted(pinned.items()):
        for address in addresses:
            by_address.setdefault(address, []).append(host)
    aliases = [{"ip": ip, "hostnames": hosts} for ip, hosts in sorted(by_address.items())]
    return {"hostAliases": aliases, "dnsPolicy": "None", "dnsConfig": {"nameservers": [NO_RESOLVER]}}

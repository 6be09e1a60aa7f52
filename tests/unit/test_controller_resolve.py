"""Endpoint names to addresses with this machine's resolver (the hosts file answers localhost)."""

from __future__ import annotations

import ipaddress

from gdpval.controller.effects.resolve import resolve_hosts


def test_names_resolve_to_addresses_and_failures_are_listed():
    found, missing = resolve_hosts(["localhost", "no-such-host.invalid", "bad..name"])
    assert set(found) == {"localhost"} and found["localhost"] and all(ipaddress.ip_address(a).is_loopback for a in found["localhost"])
    assert found["localhost"] == sorted(set(found["localhost"])), "each address once, in a stable order"
    assert missing == ["no-such-host.invalid", "bad..name"]


def test_nothing_to_resolve():
    assert resolve_hosts([]) == ({}, [])

"""Who a root runner's sandboxes run as on the host (GDPVAL_SANDBOX_UID), and how
bubblewrap is started as that uid."""

from __future__ import annotations

import os

import pytest

from gdpval.sandbox.launch import DEFAULT_OWNER, OWNER_ENV, SETPRIV, SandboxOwnerError, dropping, parse_owner, sandbox_owner


@pytest.mark.parametrize(("text", "owner"), [("65533", (65533, 65533)), ("64123:64124", (64123, 64124)), (" 70000 ", (70000, 70000))])
def test_an_owner_is_a_uid_or_uid_and_gid(text: str, owner: tuple[int, int]) -> None:
    assert parse_owner(text) == owner


@pytest.mark.parametrize("text", ["0", "0:1000", "1000:0", "", "nobody", "1:2:3", "-5", "4294967295", "4294967294", "12:"])
def test_root_the_reserved_ids_and_garbage_are_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(SandboxOwnerError, match=f"{OWNER_ENV}=.*uid:gid.*default {DEFAULT_OWNER}"):
        parse_owner(text)


def test_only_a_root_runner_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OWNER_ENV, "64000")
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    assert sandbox_owner() is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert sandbox_owner() == (64000, 64000)
    monkeypatch.delenv(OWNER_ENV)
    assert sandbox_owner() == (DEFAULT_OWNER, DEFAULT_OWNER)


def test_only_an_owner_is_dropped_to() -> None:
    assert dropping(["/usr/bin/bwrap", "x"], None) == ["/usr/bin/bwrap", "x"]
    assert dropping(["/usr/bin/bwrap", "x"], (64123, 64124)) == [SETPRIV, "--reuid=64123", "--regid=64124", "--clear-groups", "--", "/usr/bin/bwrap", "x"]

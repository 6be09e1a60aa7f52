"""A pool pod's agent at its claim: it waits ready, trusts only its own claim's Secret, takes on the run's settings."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from gdpval import contract
from gdpval.errors import GdpvalError
from gdpval.runner import claim as claims

CLAIM = contract.Claim(id="id1", run="ns.r-1", output="s3://b/out", sample="t-r0", attempt=1, endpoint="http://10.0.0.2:9000", region="eu-1", outage_hold=7)


def _write(folder, name, text):
    (folder / name).write_text(text)


def test_it_waits_ready_then_for_the_claim_and_a_secret_of_that_claim(tmp_path):
    ready = tmp_path / "ready"
    _write(tmp_path, contract.CLAIM_ID_KEY, "an-earlier-claim")

    def claim_later() -> None:
        while not ready.exists():
            time.sleep(0.01)
        _write(tmp_path, "claim", CLAIM.wire())
        time.sleep(0.1)
        _write(tmp_path, contract.CLAIM_ID_KEY, "id1")

    thread = threading.Thread(target=claim_later)
    thread.start()
    started = time.monotonic()
    got = claims.wait_for_claim(tmp_path, ready, poll=0.01)
    thread.join()
    assert got == CLAIM and time.monotonic() - started >= 0.1, "a Secret of another claim is not this claim's"


def test_a_secret_that_never_comes_or_a_bad_claim_is_a_clear_error(tmp_path):
    _write(tmp_path, "claim", CLAIM.wire())
    with pytest.raises(GdpvalError, match="did not reach"):
        claims.wait_for_claim(tmp_path, tmp_path / "ready", poll=0.01, secret_timeout=0.05)
    _write(tmp_path, "claim", "{not json")
    with pytest.raises(GdpvalError, match="unreadable claim"):
        claims.wait_for_claim(tmp_path, tmp_path / "ready", poll=0.01)


def test_take_on_sets_credentials_endpoints_and_hold_from_the_claim(tmp_path, monkeypatch):
    _write(tmp_path, contract.API_KEY_ENV, "sk-1\n")
    _write(tmp_path, "AWS_ACCESS_KEY_ID", "ak")
    environ: dict[str, str] = {}
    claims.take_on(CLAIM, tmp_path, environ)
    assert environ == {
        contract.API_KEY_ENV: "sk-1",
        "AWS_ACCESS_KEY_ID": "ak",
        "AWS_ENDPOINT_URL": "http://10.0.0.2:9000",
        "AWS_REGION": "eu-1",
        contract.OUTAGE_HOLD_ENV: "7",
    }


def test_pinned_hosts_resolve_to_their_addresses_and_others_as_before(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    claims.pin_hosts({"Model.Example": ["127.0.0.1"]})
    assert {info[4][0] for info in socket.getaddrinfo("model.example", 80, type=socket.SOCK_STREAM)} == {"127.0.0.1"}
    assert socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0][4][0] == "127.0.0.1"


def test_a_claim_of_any_sample_id_goes_over_the_wire_as_ascii_and_comes_back_whole():
    awkward = contract.Claim(id="i", run="ns.r", output="s3://b/o", sample="t\u2028\x00\ud800é-r0", attempt=1)
    text = awkward.wire()
    assert text.isascii() and text.encode("utf-8")
    assert contract.Claim.parse(text) == awkward

"""The scripted model's gate and judge counters: held requests cut by a release answer 503 (their client is gone);
an answered judge request asked again is counted as a repeat."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from gdpval.fakemodel.model import FakeModel, FakeModelConfig, Reply
from gdpval.judge import wire
from support.polling import wait_until


def pairwise_body(task: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": t} for t in (f"# Task\n{task}", f"{wire.SET_HEADER}A", "mine", f"{wire.SET_HEADER}B", "theirs", wire.SETS_END)]
    return {"model": "judge", "messages": [{"role": "user", "content": parts}], "response_format": wire.pairwise_response_format()}


def ask(model: FakeModel, body: dict[str, Any]) -> Reply:
    return model.handle("POST", "/v1/chat/completions", None, json.dumps(body).encode())


def control(model: FakeModel, action: str, body: bytes = b"") -> Reply:
    return model.handle("POST", f"/fake/{action}", None, body)


def held_reply(model: FakeModel, body: dict[str, Any]) -> tuple[threading.Thread, list[Reply]]:
    """A request sent on a thread and seen held at the gate."""
    replies: list[Reply] = []
    thread = threading.Thread(target=lambda: replies.append(ask(model, body)))
    thread.start()
    wait_until(lambda: model.stats()["held"] == 1, 30, "the request held", 0.01)
    return thread, replies


@pytest.mark.parametrize("cut", [True, False])
def test_a_release_that_cuts_answers_the_held_request_503_and_opens_the_gate(cut: bool) -> None:
    model = FakeModel(FakeModelConfig(model="judge", hold_after=0))
    thread, replies = held_reply(model, pairwise_body("one"))
    assert control(model, "release", json.dumps({"cut": cut}).encode()).status == 200
    thread.join(30)
    assert [r.status for r in replies] == [503 if cut else 200]
    assert ask(model, pairwise_body("two")).status == 200  # the gate is open again
    stats = model.stats()
    assert (stats["completions"], stats["faults"].get("cut", 0)) == (1 if cut else 2, 1 if cut else 0)


def test_a_judge_request_answered_twice_counts_one_repeat() -> None:
    model = FakeModel(FakeModelConfig(model="judge"))
    for task in ("one", "two", "one", "one"):
        assert ask(model, pairwise_body(task)).status == 200
    assert (model.stats()["completions"], model.stats()["judge_repeats"]) == (4, 2)


@pytest.mark.parametrize("body", [b"{", b'{"cut": "yes"}', b"[true]"])
def test_a_bad_release_body_is_a_400_naming_cut(body: bytes) -> None:
    reply = control(FakeModel(FakeModelConfig(hold_after=0)), "release", body)
    assert reply.status == 400 and reply.body["error"]["param"] == "cut"

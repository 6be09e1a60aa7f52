"""The scripted model's chosen-calls mode: `fake_script` in the request body plays given tool calls in order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gdpval.fakemodel import script
from gdpval.fakemodel.model import SCRIPT_BODY_FIELD, FakeModel, FakeModelConfig

STEPS = [{"bash": "id"}, {"python_exec": "print(1)"}]


def chat(model: FakeModel, messages: list[dict[str, Any]], steps: object) -> tuple[int, dict[str, Any]]:
    body = {"model": "scripted", "messages": messages, SCRIPT_BODY_FIELD: steps}
    reply = model.handle("POST", "/v1/chat/completions", None, json.dumps(body).encode())
    return reply.status, reply.body


def test_plays_each_call_in_order_then_answers() -> None:
    model = FakeModel(FakeModelConfig())
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task"}]
    played = []
    for _ in range(3):
        status, body = chat(model, messages, STEPS)
        assert status == 200
        message = body["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            break
        call = message["tool_calls"][0]
        played.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok"})
    assert played == [("bash", {"command": "id"}), ("python_exec", {"code": "print(1)"})]
    assert messages[-1]["content"] == script.SCRIPT_DONE


@pytest.mark.parametrize("steps", [[], "id", [{"bash": 1}], [{"submit": "x"}], [{"bash": "a", "python_exec": "b"}]])
def test_a_malformed_script_is_a_400_naming_the_field(steps: object) -> None:
    status, body = chat(FakeModel(FakeModelConfig()), [{"role": "user", "content": "task"}], steps)
    assert status == 400 and body["error"]["param"] == SCRIPT_BODY_FIELD


def test_script_calls_are_counted_by_their_own_ids() -> None:
    steps = script.validate_script(STEPS)
    other = {"role": "assistant", "tool_calls": [{"id": "call_fm_list_0_ok_abc", "function": {"name": "bash"}}]}
    message = script.scripted_message([{"role": "user", "content": "t"}, other], steps)
    assert message["tool_calls"][0]["id"] == f"{script.SCRIPT_CALL_PREFIX}0"

"""Model replies in the dialects of real servers, read into one shape (pure: no server)."""

import json

import pytest

from gdpval.agent.context import elide_old_output, estimate_tokens
from gdpval.agent.prompt import ELIDED
from gdpval.agent.reply import assemble_stream, parse_completion, text_of, tokens
from gdpval.sample import Usage


def body(message: dict, finish: str = "stop", usage: dict | None = None) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}], "usage": usage}


def call(ident, name="bash", arguments='{"command": "ls"}') -> dict:
    return {**({"id": ident} if ident is not None else {}), "type": "function", "function": {"name": name, "arguments": arguments}}


def test_content_as_a_list_of_parts_is_its_text():
    parts = [{"type": "text", "text": "Done: "}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "output_text", "text": "two files."}]
    assert text_of(parts) == "Done: two files."
    reply = parse_completion(body({"content": parts}), 0)
    assert reply.content == "Done: two files." and reply.reasoning == {"content_parts": [parts[1]]}


def test_reasoning_fields_are_kept_apart_from_the_content():
    reply = parse_completion(body({"content": "ok", "reasoning_content": "hmm", "reasoning_details": [{"type": "reasoning.text", "text": "hmm"}]}), 0)
    assert reply.content == "ok"
    assert reply.reasoning == {"reasoning_content": "hmm", "reasoning_details": [{"type": "reasoning.text", "text": "hmm"}]}


def test_parallel_calls_keep_their_order_and_ids():
    reply = parse_completion(body({"content": None, "tool_calls": [call("a"), call("b", "python_exec", '{"code": "1"}')]}, "tool_calls"), 3)
    assert [(c.id, c.given_id, c.name) for c in reply.tool_calls] == [("a", "a", "bash"), ("b", "b", "python_exec")]


def test_calls_without_ids_or_with_repeated_ones_get_ids_of_their_own():
    reply = parse_completion(body({"tool_calls": [call(None), call(""), call("x"), call("x")]}, "tool_calls"), 7)
    ids = [c.id for c in reply.tool_calls]
    assert ids == ["call_gdpval_7_0", "call_gdpval_7_1", "x", "call_gdpval_7_3"]
    assert [c.given_id for c in reply.tool_calls] == [None, None, "x", "x"]


def test_arguments_sent_as_an_object_become_json_text():
    [parsed] = parse_completion(body({"tool_calls": [call("a", arguments={"command": "ls"})]}), 0).tool_calls
    assert json.loads(parsed.arguments) == {"command": "ls"}


def test_a_body_without_choices_is_refused():
    with pytest.raises(ValueError, match="no choices"):
        parse_completion({"choices": []}, 0)


@pytest.mark.parametrize(
    "usage, counted, complete",
    [
        ({"prompt_tokens": 10, "completion_tokens": 3}, Usage(input_tokens=10, output_tokens=3), True),
        ({"prompt_tokens": 10, "completion_tokens": None}, Usage(input_tokens=10), False),
        ({"total_tokens": 13}, Usage(), False),
        (None, Usage(), False),
    ],
)
def test_usage_missing_or_partial_counts_what_is_known(usage, counted, complete):
    assert tokens(usage) == (counted, complete)


def test_a_stream_is_assembled_into_one_completion():
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "let me "}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "see", "content": "Listing"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "bash", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"comm'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"name": "bash", "arguments": '{"command": "pwd"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "bash", "arguments": 'and": "ls"}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
    ]
    reply = parse_completion(assemble_stream(chunks), 2)
    assert reply.content == "Listing" and reply.reasoning == {"reasoning_content": "let me see"}
    assert [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [
        ("c1", "bash", {"command": "ls"}),  # a name repeated in a later delta is not doubled
        ("call_gdpval_2_1", "bash", {"command": "pwd"}),
    ]
    assert (reply.finish_reason, reply.usage) == ("tool_calls", {"prompt_tokens": 5, "completion_tokens": 9})


def conversation(outputs: list[str]) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "task"}]
    for index, output in enumerate(outputs):
        messages.append({"role": "assistant", "content": "", "tool_calls": [call(f"c{index}")]})
        messages.append({"role": "tool", "tool_call_id": f"c{index}", "content": output})
    return messages


def test_context_within_budget_is_left_alone():
    messages = conversation(["a" * 100, "b" * 100])
    kept, elided = elide_old_output(messages, 1000)
    assert kept == messages and elided.tool_call_ids == []


def test_old_tool_output_is_elided_oldest_first_down_to_the_budget_and_the_latest_kept():
    messages = conversation(["a" * 8000, "b" * 8000, "c" * 8000, "d" * 8000])
    kept, elided = elide_old_output(messages, estimate_tokens(messages) - 3000)
    assert elided.tool_call_ids == ["c0", "c1"]
    assert [m["content"] for m in kept if m["role"] == "tool"] == [ELIDED, ELIDED, "c" * 8000, "d" * 8000]
    assert elided.tokens_after == estimate_tokens(kept) <= estimate_tokens(messages) - 3000
    assert messages[2]["content"] == "a" * 8000  # the caller's list is not changed


def test_the_latest_turn_is_kept_even_over_budget():
    messages = conversation(["a" * 8000, "b" * 8000])
    kept, elided = elide_old_output(messages, 1000)
    assert elided.tool_call_ids == ["c0"] and kept[-1]["content"] == "b" * 8000

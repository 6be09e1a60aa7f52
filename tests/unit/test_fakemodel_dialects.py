"""The fake model's dialects as pure functions: what each refuses and how it shapes a reply."""

import json

import pytest

from gdpval.fakemodel import dialects, script
from gdpval.fakemodel.dialects import Refused, check_request, chunks, cut, shape

CALL = {"id": "call_fm_list_0_ok_abc", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls /refs"})}}
TOOL_TURN = {"role": "assistant", "content": None, "tool_calls": [CALL]}


def request(*messages: dict, **fields) -> dict:
    return {"model": "scripted", "messages": [{"role": "user", "content": "task"}, *messages], **fields}


def test_unknown_dialects_are_named():
    with pytest.raises(ValueError, match="unknown dialect 'grpc'"):
        dialects.validate(["parts", "grpc"])


@pytest.mark.parametrize(
    "body, spoken, param",
    [
        (request(), ("stream-only",), "stream"),
        (request(max_tokens=10), ("max-completion-tokens",), "max_tokens"),
        (request(reasoning_effort="extreme"), (), "reasoning_effort"),
        (request({"role": "assistant", "content": "x", "reasoning_content": "hmm"}), ("reasoning",), "messages"),
        (request(TOOL_TURN, {"role": "user", "content": "go on"}), (), "messages"),
        (request(TOOL_TURN, {"role": "tool", "tool_call_id": "other", "content": "x"}), (), "messages"),
    ],
)
def test_refusals(body, spoken, param):
    with pytest.raises(Refused) as refused:
        check_request(body, spoken)
    assert refused.value.param == param


@pytest.mark.parametrize(
    "body, spoken",
    [
        (request(stream=True), ("stream-only",)),
        (request(max_completion_tokens=10, reasoning_effort="high"), ("max-completion-tokens",)),
        (request({"role": "assistant", "content": "x", "reasoning_content": "hmm"}), ()),
        (request(TOOL_TURN, {"role": "tool", "tool_call_id": CALL["id"], "content": "x"}), ()),
    ],
)
def test_accepted(body, spoken):
    check_request(body, spoken)


def test_parallel_adds_a_probe_that_must_come_back_with_its_output():
    turn = shape(TOOL_TURN, ("parallel",), "list-0")
    main, probe = turn["tool_calls"]
    assert main == CALL and json.loads(probe["function"]["arguments"])["command"] == "echo FAKEMODEL-PROBE-list-0"
    answered = [
        {"role": "tool", "tool_call_id": main["id"], "content": "x"},
        {"role": "tool", "tool_call_id": probe["id"], "content": "FAKEMODEL-PROBE-list-0\n[exit code 0]"},
    ]
    check_request(request(turn, *answered), ())
    swapped = [answered[0], {**answered[1], "content": "x"}]
    with pytest.raises(Refused, match="does not carry"):
        check_request(request(turn, *swapped), ())


def test_shapes_of_parts_reasoning_and_no_ids():
    turn = shape(TOOL_TURN, ("parts", "reasoning", "no-ids"), "list-0")
    assert turn["content"] == [{"type": "text", "text": "Working on list-0."}]
    assert turn["reasoning_content"] and turn["reasoning_details"][0]["type"] == "reasoning.text"
    assert "id" not in turn["tool_calls"][0]


def test_the_script_finds_its_calls_when_the_client_made_up_the_ids():
    info = "Do it.\n\n---\nWorking directory: /w\nDeliverables folder: /w/deliverable_files\nReference files: none"
    first = script.render_message(script.plan([{"role": "user", "content": info}]))
    without_id = {**first["tool_calls"][0], "id": "call_gdpval_0_0"}
    wrote = script.WROTE_PREFIX + json.dumps({"path": "/w/deliverable_files/x.md", "bytes": 3})
    messages = [
        {"role": "user", "content": info},
        {"role": "assistant", "tool_calls": [without_id]},
        {"role": "tool", "tool_call_id": "call_gdpval_0_0", "content": wrote},
    ]
    assert script.plan(messages).step == "answer"


def test_a_token_limit_cuts_content_or_arguments_mid_json():
    message, was_cut = cut({"role": "assistant", "content": "x" * 100}, 10)
    assert was_cut and message["content"] == "x" * 40
    long_call = {**CALL, "function": {"name": "bash", "arguments": json.dumps({"command": "y" * 200})}}
    message, was_cut = cut({"role": "assistant", "content": None, "tool_calls": [long_call, CALL]}, 20)
    [kept] = message["tool_calls"]
    assert was_cut and len(kept["function"]["arguments"]) == 80
    with pytest.raises(ValueError):
        json.loads(kept["function"]["arguments"])
    assert cut(TOOL_TURN, 1000) == (TOOL_TURN, False)


@pytest.mark.parametrize("spoken, expected", [((), 14 + 64), (("partial-usage",), None)])
def test_usage_whole_or_partial_and_reasoning_tokens(spoken, expected):
    usage = dialects.usage(100, 14, "medium", spoken)
    assert usage["prompt_tokens"] == 100 and usage["completion_tokens"] == expected
    assert dialects.usage(1, 1, None, ("no-usage",)) is None


def test_chunks_carry_the_whole_reply():
    completion = {
        "id": "c",
        "created": 0,
        "model": "scripted",
        "system_fingerprint": "fp",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Listing the files now.", "tool_calls": [CALL]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2},
    }
    events = chunks(completion, include_usage=True)
    deltas = [c["choices"][0]["delta"] for c in events if c["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == "Listing the files now."
    pieces = [t["function"]["arguments"] for d in deltas for t in d.get("tool_calls", [])]
    assert "".join(pieces) == CALL["function"]["arguments"] and len(pieces) > 2
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls" and events[-1]["usage"] == completion["usage"]

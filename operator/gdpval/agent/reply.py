"""A model reply as the loop uses it, whatever dialect of the OpenAI wire format the server speaks.

Servers differ in what a chat completion carries: `content` as a string or a list of parts, reasoning
beside it (`reasoning_content`, `reasoning`, `reasoning_details`), usage whole, partial or absent,
tool calls with or without ids, arguments as a string or an object, and some answer only as a stream
of deltas. These pure functions turn a completion body, or the chunks of a stream, into one shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gdpval.sample import Usage, storable

# Fields some servers put beside an assistant message's content: kept in the transcript, never sent back.
REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_details")
TEXT_PART_TYPES = ("text", "output_text")
LENGTH = "length"  # the finish_reason of a reply stopped by the token limit
SYNTHETIC_ID = "call_gdpval_{step}_{index}"


@dataclass(frozen=True)
class ToolCall:
    """`id` is what the loop sends back; `given_id` what the server sent (None: no usable id)."""

    id: str
    name: str
    arguments: str
    given_id: str | None = None


@dataclass(frozen=True)
class ModelReply:
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    reasoning: dict[str, Any] = field(default_factory=dict)

    @property
    def cut_off(self) -> bool:
        return self.finish_reason == LENGTH


def text_of(content: Any) -> str:
    """A message's text as the model sent it (the transcript keeps even a lone surrogate): a string as
    is, or the text parts of a list of parts joined. What is sent back goes through `storable`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part["text"] for part in content if _is_text(part))
    return ""


def _is_text(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type", "text") in TEXT_PART_TYPES and isinstance(part.get("text"), str)


def _obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one: servers leave fields out or null."""
    return value if isinstance(value, dict) else {}


def _arguments(value: Any) -> str:
    """Arguments as the JSON text the tools parse (some servers send an object)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_completion(body: Any, step: int) -> ModelReply:
    """A non-streamed chat completion body; ValueError when it holds no choice."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("the model API returned no choices")
    choice = choices[0]
    message = _obj(choice.get("message"))
    calls = []
    for raw in message.get("tool_calls") or []:
        function = _obj(_obj(raw).get("function"))
        ident = _obj(raw).get("id")
        given = ident if isinstance(ident, str) and ident else None
        calls.append(ToolCall(given or "", str(function.get("name") or ""), _arguments(function.get("arguments")), given))
    reasoning = {name: message[name] for name in REASONING_FIELDS if message.get(name)}
    content = message.get("content")
    other_parts = [part for part in content if not _is_text(part)] if isinstance(content, list) else []
    if other_parts:  # e.g. a gateway's "thinking" parts: kept for the transcript like the fields above
        reasoning["content_parts"] = other_parts
    usage = body.get("usage")
    return ModelReply(
        text_of(message.get("content")), with_ids(calls, step), choice.get("finish_reason"), usage if isinstance(usage, dict) else None, reasoning
    )


def with_ids(calls: list[ToolCall], step: int) -> tuple[ToolCall, ...]:
    """Every call with an id of its own: a missing or repeated one is replaced by one we make up."""
    seen: set[str] = set()
    out = []
    for index, call in enumerate(calls):
        usable = call.given_id if call.given_id and call.given_id not in seen else None
        ident = usable or SYNTHETIC_ID.format(step=step, index=index)
        seen.add(ident)
        out.append(replace(call, id=storable(ident), given_id=call.given_id))
    return tuple(out)


def assemble_stream(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The chunks of a streamed completion as one completion body: content and reasoning joined,
    tool calls gathered by their `index` (name given once or repeated, arguments in pieces), the last
    finish_reason, and usage from the chunk that carries it."""
    content: list[str] = []
    reasoning: dict[str, list[str]] = {}
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: dict[str, Any] | None = None
    for chunk in chunks:
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            finish = choice.get("finish_reason") or finish
            delta = _obj(choice.get("delta"))
            content.append(text_of(delta.get("content")))
            for name in REASONING_FIELDS:
                if isinstance(delta.get(name), str):
                    reasoning.setdefault(name, []).append(delta[name])
            for piece in delta.get("tool_calls") or []:
                _merge_call(calls, piece)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    message |= {name: "".join(parts) for name, parts in reasoning.items()}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}


def _merge_call(calls: dict[int, dict[str, Any]], piece: Any) -> None:
    if not isinstance(piece, dict):
        return
    given = piece.get("index")
    index = given if isinstance(given, int) else len(calls)
    call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    function = _obj(piece.get("function"))
    if piece.get("id") and not call["id"]:
        call["id"] = piece["id"]
    if function.get("name") and not call["function"]["name"]:
        call["function"]["name"] = function["name"]
    if function.get("arguments"):
        call["function"]["arguments"] += _arguments(function["arguments"])


def tokens(usage: dict[str, Any] | None) -> tuple[Usage, bool]:
    """What a turn's usage says, and whether it said all of it (both counts present)."""
    if usage is None:
        return Usage(), False
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    counted = Usage(input_tokens=prompt if _count(prompt) else 0, output_tokens=completion if _count(completion) else 0)
    return counted, _count(prompt) and _count(completion)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

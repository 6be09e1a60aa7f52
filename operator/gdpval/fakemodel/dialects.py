"""Dialects of the OpenAI wire format that real servers speak, played by the fake model on demand.

Each is a name in ``DIALECTS``, chosen server-wide (``gdpval fake-model --dialect``) or per request
(the body field ``fake_dialects``, a list):

- ``parallel``: every tool turn also calls a probe (a bash ``echo`` of a marker) in the same reply;
  the next request must answer both calls, in order, each under its id, the probe with its marker.
- ``parts``: assistant ``content`` is a list of text parts, not a string.
- ``reasoning``: replies carry ``reasoning_content`` and ``reasoning_details``; a request that sends
  either back in an assistant message is refused (as DeepSeek's API does).
- ``no-usage`` / ``partial-usage``: replies carry no ``usage``, or one without ``completion_tokens``.
- ``no-ids``: tool calls come without an ``id``.
- ``max-completion-tokens``: ``max_tokens`` is refused, as OpenAI's reasoning models do.
- ``stream-only``: a request without ``stream: true`` is refused, as some gateways do.

Whatever the dialect, ``max_tokens`` / ``max_completion_tokens`` cut a longer reply (finish_reason
``length``, arguments cut mid-JSON), ``stream: true`` is answered as server-sent chunks, and a
conversation whose tool calls are not each answered in order is refused, as OpenAI refuses it.
Pure functions: the server applies them.
"""

from __future__ import annotations

import json
from typing import Any

from gdpval.fakemodel.script import image_urls, message_text, png_size

DIALECTS = ("parallel", "parts", "reasoning", "no-usage", "partial-usage", "no-ids", "max-completion-tokens", "stream-only")
BODY_FIELD = "fake_dialects"
PROBE_MARKER = "FAKEMODEL-PROBE-"
REASONING_FIELDS = ("reasoning_content", "reasoning_details")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_TOKENS = {"none": 0, "minimal": 8, "low": 16, "medium": 64, "high": 256, "xhigh": 512}
CHARS_PER_TOKEN = 4
STREAM_PIECE = 16  # characters of content or arguments per streamed delta


class Refused(ValueError):
    """A request this server refuses: (message, param), answered as HTTP 400."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code


def validate(dialects: object) -> tuple[str, ...]:
    if not isinstance(dialects, list | tuple) or not all(isinstance(d, str) for d in dialects):
        raise ValueError("dialects must be a list of names")
    unknown = [d for d in dialects if d not in DIALECTS]
    if unknown:
        raise ValueError(f"unknown dialect {unknown[0]!r}; known: {', '.join(DIALECTS)}")
    return tuple(dialects)


def check_request(body: dict[str, Any], dialects: tuple[str, ...]) -> None:
    """Raise Refused for what the dialect (or OpenAI itself) does not accept."""
    if "stream-only" in dialects and body.get("stream") is not True:
        raise Refused("This gateway only serves streamed completions: send stream=true.", "stream", "unsupported_value")
    if "max-completion-tokens" in dialects and "max_tokens" in body:
        raise Refused(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter"
        )
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise Refused(
            f"Invalid value for 'reasoning_effort': {effort!r}. Supported values are: {', '.join(REASONING_EFFORTS)}.", "reasoning_effort", "invalid_value"
        )
    messages = body["messages"]
    if "reasoning" in dialects and any(m.get("role") == "assistant" and any(f in m for f in REASONING_FIELDS) for m in messages):
        raise Refused("The reasoning_content of an assistant message must not be sent back in the input messages.", "messages")
    check_tool_answers(messages)
    check_images(messages)


def check_images(messages: list[dict[str, Any]]) -> None:
    """Every image part a PNG data URL whose data decodes, as OpenAI refuses an image it cannot read."""
    for index, url in enumerate(image_urls(messages)):
        if png_size(url) is None:
            raise Refused(f"Invalid image in messages (image {index + 1}): not a readable PNG data URL.", "messages", "invalid_image_format")


def check_tool_answers(messages: list[dict[str, Any]]) -> None:
    """Each assistant tool call answered right after it by a tool message with its id, in order; a probe
    answered with its marker (so results cannot have been swapped)."""
    for index, message in enumerate(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not isinstance(calls, list):
            continue
        for position, call in enumerate(calls):
            ident = call.get("id") if isinstance(call, dict) else None
            where = index + 1 + position
            if where >= len(messages):
                break  # the conversation ends with this call: nothing to check yet
            answer = messages[where]
            if answer.get("role") != "tool" or answer.get("tool_call_id") != ident:
                raise Refused(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                    f"'tool_call_id', in order ({ident!r} is not answered at position {where}).",
                    "messages",
                )
            marker = _probe_marker(call)
            if marker and marker not in message_text(answer.get("content")):
                raise Refused(f"The tool message for {ident!r} does not carry that call's output.", "messages")


def _probe_marker(call: Any) -> str | None:
    """The marker a whole probe call echoes (a probe cut off by the token limit was never run)."""
    function = call.get("function") if isinstance(call, dict) else None
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(arguments, str) or PROBE_MARKER not in arguments:
        return None
    try:
        command = json.loads(arguments).get("command", "")
    except (ValueError, AttributeError):
        return None
    return command.removeprefix("echo ") if isinstance(command, str) and command.startswith("echo " + PROBE_MARKER) else None


def is_probe(arguments: str) -> bool:
    return PROBE_MARKER in arguments


def shape(message: dict[str, Any], dialects: tuple[str, ...], turn: str) -> dict[str, Any]:
    """The assistant message as the dialects write it; `turn` names it (for probe markers and reasoning)."""
    message = dict(message)
    calls = [dict(c) for c in message.get("tool_calls") or []]
    if calls and "parallel" in dialects:
        marker = PROBE_MARKER + turn
        probe = {
            "id": calls[0]["id"].replace("_", "_probe_", 1) + "p",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"echo {marker}"})},
        }
        calls.append(probe)
    if "no-ids" in dialects:
        calls = [{k: v for k, v in c.items() if k != "id"} for c in calls]
    if calls:
        message["tool_calls"] = calls
    if "parts" in dialects:
        text = message.get("content") or (f"Working on {turn}." if calls else "")
        message["content"] = [{"type": "text", "text": text}]
    if "reasoning" in dialects:
        thought = f"Thinking about {turn}."
        message["reasoning_content"] = thought
        message["reasoning_details"] = [{"type": "reasoning.text", "text": thought}]
    return message


def token_limit(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def cut(message: dict[str, Any], limit: int | None) -> tuple[dict[str, Any], bool]:
    """The message within `limit` tokens (content, then each call's arguments, at 4 characters a
    token), and whether it was cut: a cut call keeps a prefix of its JSON, later calls are dropped."""
    if limit is None:
        return message, False
    budget = limit * CHARS_PER_TOKEN
    content = message.get("content")
    text = message_text(content)
    if len(text) > budget:
        cut_text = text[:budget]
        return {**message, "content": cut_text if isinstance(content, str) else [{"type": "text", "text": cut_text}], "tool_calls": None}, True
    budget -= len(text)
    kept = []
    for call in message.get("tool_calls") or []:
        arguments = call["function"]["arguments"]
        if len(arguments) > budget:
            kept.append({**call, "function": {**call["function"], "arguments": arguments[:budget]}})
            return {**message, "tool_calls": kept}, True
        budget -= len(arguments)
        kept.append(call)
    return message, False


def usage(prompt_tokens: int, completion_tokens: int, effort: str | None, dialects: tuple[str, ...]) -> dict[str, Any] | None:
    if "no-usage" in dialects:
        return None
    reasoning = REASONING_TOKENS.get(effort or "", 0)
    if "partial-usage" in dialects:
        return {"prompt_tokens": prompt_tokens, "completion_tokens": None, "total_tokens": None}
    total = completion_tokens + reasoning
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": total,
        "total_tokens": prompt_tokens + total,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A completion as the chunks of a stream: content and arguments in small pieces, the tool call's
    id and name in its first delta, finish_reason last, then usage when asked for."""
    head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    for name in REASONING_FIELDS[:1]:
        if isinstance(message.get(name), str):
            out += [chunk({name: piece}) for piece in _pieces(message[name])]
    out += [chunk({"content": piece}) for piece in _pieces(message_text(message.get("content")))]
    for index, call in enumerate(message.get("tool_calls") or []):
        first = {"index": index, "type": "function", "function": {"name": call["function"]["name"], "arguments": ""}}
        if "id" in call:
            first["id"] = call["id"]
        out.append(chunk({"tool_calls": [first]}))
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in _pieces(call["function"]["arguments"])]
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append(head | {"choices": [], "usage": completion.get("usage")})
    return out


def _pieces(text: str) -> list[str]:
    return [text[i : i + STREAM_PIECE] for i in range(0, len(text), STREAM_PIECE)]

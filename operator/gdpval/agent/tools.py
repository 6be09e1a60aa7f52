"""Tool schemas offered to the model and how tool results are shown back to it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOOL_ARGUMENT = {"bash": "command", "python_exec": "code", "submit": "answer", "view": "path"}
VIEW = "view"
WORK_TOOLS = ("bash", "python_exec")
TIMEOUT = "timeout"
# What one tool result may carry back to the model and the transcript, whatever the sandbox answered.
MAX_RESULT_CHARS = 40_000
CUT_OFF_CALL = (
    "error: your reply was cut off by the token limit inside this call's arguments, so it was not run; "
    "send it again in smaller pieces (e.g. write a long file in several calls)"
)


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    """A function tool whose first property is its one required argument."""
    required = [next(iter(properties))]
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def _work_tool(name: str, description: str, field: str, field_description: str) -> dict[str, Any]:
    timeout = {
        "type": "number",
        "description": "Optional: seconds before the run is killed (the harness applies a default and a cap).",
    }
    return _tool(name, description, {field: {"type": "string", "description": field_description}, TIMEOUT: timeout})


TOOLS: list[dict[str, Any]] = [
    _work_tool(
        "bash",
        "Run a bash command in the working directory. Returns combined stdout/stderr and the exit code.",
        "command",
        "The command to run.",
    ),
    _work_tool(
        "python_exec",
        "Run a Python 3 program in the working directory. Print what you want to see.",
        "code",
        "The Python source to run.",
    ),
]

SUBMIT_TOOL = _tool(
    "submit",
    "Hand in the finished work. Call it once, when every requested file is saved; it ends the task.",
    {"answer": {"type": "string", "description": "Your final answer: a short summary of what you delivered."}},
)


VIEW_TOOL = _tool(
    VIEW,
    "Look at a file of the working directory as pictures: the first pages of a PDF or an Office document "
    "(as LibreOffice lays it out), the first slides of a deck, or an image. Use it to check how a deliverable looks.",
    {"path": {"type": "string", "description": "The file, relative to the working directory or absolute."}},
)


def tools_for(finish: str, view: bool = False) -> list[dict[str, Any]]:
    """The tools of a run: the work tools, `view` when the run offers images, `submit` when a sample ends by submitting."""
    return [*TOOLS, *([VIEW_TOOL] if view else []), *([SUBMIT_TOOL] if finish == "submit" else [])]


@dataclass(frozen=True)
class ParsedCall:
    """A tool call checked against the schema; `problem` is what to tell the model if it is wrong.

    `repaired` says the arguments parsed only leniently (raw control characters inside strings, as
    some servers emit), so the transcript can show it.
    """

    name: str
    argument: str = ""
    timeout: float | None = None
    repaired: bool = False
    problem: str = ""


def loads_lenient(raw: str) -> tuple[Any, bool]:
    """JSON as sent, else as a lenient parser reads it; (value, whether leniency was needed)."""
    try:
        return json.loads(raw), False
    except json.JSONDecodeError:
        return json.loads(raw, strict=False), True


def parse_call(name: str, raw_arguments: str | None, offered: Sequence[str] = WORK_TOOLS, cut_off: bool = False) -> ParsedCall:
    """`cut_off`: the reply carrying the call was stopped by the token limit, so broken JSON is a cut."""
    if name not in offered:
        return ParsedCall(name, problem=f"error: unknown tool {name!r}; available tools: {', '.join(offered)}")
    field = TOOL_ARGUMENT[name]
    try:
        args, repaired = loads_lenient(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        if cut_off:
            return ParsedCall(name, problem=CUT_OFF_CALL)
        return ParsedCall(name, problem=f'error: the arguments are not valid JSON ({exc.msg}); send {{"{field}": "..."}}')
    if not isinstance(args, dict):
        args = {}
    value = args.get(field)
    if not isinstance(value, str):
        return ParsedCall(name, repaired=repaired, problem=f"error: {name} needs a string argument {field!r}")
    timeout = args.get(TIMEOUT) if name in WORK_TOOLS else None
    if timeout is not None and not _is_seconds(timeout):
        return ParsedCall(name, repaired=repaired, problem=f"error: {TIMEOUT!r} must be a positive number of seconds")
    return ParsedCall(name, argument=value, timeout=timeout, repaired=repaired)


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def applied_timeout(requested: float | None, default: float, cap: float, remaining: float) -> float:
    """What a call gets: the model's own timeout up to the cap, else the default; never past the deadline."""
    wanted = default if requested is None else min(requested, cap)
    return min(wanted, remaining)


def render_result(output: str, exit_code: int, timed_out: bool, timeout: float) -> str:
    """What the model reads back: the output (head and tail within the cap), then the exit status on its own line."""
    status = f"[timed out after {timeout:g} s; the command was killed]" if timed_out else f"[exit code {exit_code}]"
    output = capped(output.rstrip(), MAX_RESULT_CHARS - len(status) - 1)
    return f"{output}\n{status}" if output.strip() else status


def capped(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    """`text` within `limit` characters: its head and tail, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    template = "\n[... {} characters omitted by the harness ...]\n"
    keep = max(0, limit - len(template.format(len(text))))  # the real count has no more digits than len(text)
    head = keep - keep // 2
    return text[:head] + template.format(len(text) - keep) + text[len(text) - keep // 2 :]

"""Tool schemas offered to the model and how tool results are shown back to it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TOOL_ARGUMENT = {"bash": "command", "python_exec": "code"}

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the working directory. Returns combined stdout/stderr and the exit code.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "python_exec",
            "description": "Run a Python 3 program in the working directory. Print what you want to see.",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The Python source to run."}},
                "required": ["code"],
            },
        },
    },
]


@dataclass(frozen=True)
class ParsedCall:
    """A tool call checked against the schema; `problem` is what to tell the model if it is wrong."""

    name: str
    argument: str = ""
    problem: str = ""


def parse_call(name: str, raw_arguments: str | None) -> ParsedCall:
    if name not in TOOL_ARGUMENT:
        return ParsedCall(name, problem=f"error: unknown tool {name!r}; available tools: bash, python_exec")
    field = TOOL_ARGUMENT[name]
    try:
        args = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        return ParsedCall(name, problem=f"error: the arguments are not valid JSON ({exc.msg}); send {{\"{field}\": \"...\"}}")
    value = args.get(field) if isinstance(args, dict) else None
    if not isinstance(value, str):
        return ParsedCall(name, problem=f"error: {name} needs a string argument {field!r}")
    return ParsedCall(name, argument=value)


def render_result(output: str, exit_code: int, timed_out: bool, timeout: float) -> str:
    """What the model reads back: the output, then the exit status on its own line."""
    status = f"[timed out after {timeout:g} s; the command was killed]" if timed_out else f"[exit code {exit_code}]"
    return f"{output.rstrip()}\n{status}" if output.strip() else status

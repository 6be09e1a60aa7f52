"""The scripted model: request messages in, next assistant message out.

Stateless on purpose: the step is derived from the conversation itself (tool call
ids encode step, attempt and injected fault), so concurrent conversations and a
restarted server behave identically.

Script, for one task:
  1. ``list``   - bash: list every file in the folders holding the references (skipped without
                   references). Not the whole root: without isolation the root can be a shared
                   cache of every task's files, too long for the tool's output cap;
  2. ``sizes``  - python_exec: print the size of each listed file as JSON (skipped likewise);
  3. ``write``  - python_exec: write ``deliverable_files/reference_inventory.md``;
  4. ``answer`` - plain text, no tool call; or, when the request offers a ``submit`` tool, the same
                   text as submit's answer.
A step whose tool result is missing or unparsable is issued again, up to
``MAX_FAILED_ATTEMPTS`` times, then the model gives up with a text answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gdpval.submission.readiness import asked_types

DELIVERABLE_NAME = "reference_inventory.md"
STEPS = ("list", "sizes", "write", "answer")
MAX_FAILED_ATTEMPTS = 3

HTTP_FAULTS = ("429", "500", "slow", "context_length")
CONTENT_FAULTS = ("malformed", "unknown_tool")
FAULT_KINDS = HTTP_FAULTS + CONTENT_FAULTS
UNKNOWN_TOOL_NAME = "fake_unknown_tool"
SUBMIT_TOOL = "submit"

LIST_BEGIN = "FAKEMODEL-LIST-BEGIN"
LIST_END = "FAKEMODEL-LIST-END"
SIZES_PREFIX = "FAKEMODEL-SIZES "
WROTE_PREFIX = "FAKEMODEL-WROTE "

_CALL_ID = re.compile(r"^call_fm_([a-z]+)_(\d+)_([a-z]+)_[0-9a-f]+$")
_INVENTORY_LINE = re.compile(r"^- (\d+) bytes: (.+)$")
_FAULT_TAGS = {None: "ok", "malformed": "malformed", "unknown_tool": "unknowntool"}
_FIRST_LINE_MAX = 200


@dataclass(frozen=True)
class PromptInfo:
    """What the agent's prompt contract tells the model about the task."""

    first_line: str
    deliverables_dir: str
    reference_root: str | None
    references: tuple[str, ...]


@dataclass(frozen=True)
class Call:
    """One tool call found in the conversation and the text of its result."""

    step: str
    tag: str
    result: str | None


@dataclass(frozen=True)
class Plan:
    """The next turn, before any content fault is applied."""

    conversation: str
    step: str
    attempt: int
    content_faults: int
    tool: str | None = None
    arguments: dict[str, str] = field(default_factory=dict)
    text: str = ""


def message_text(content: Any) -> str:
    """Flatten OpenAI message content (a string or a list of parts) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def first_user_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def conversation_id(messages: list[dict[str, Any]]) -> str:
    """Identity of a conversation: its first user message, so every turn agrees."""
    return hashlib.sha256(first_user_text(messages).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def parse_prompt(text: str) -> PromptInfo:
    """Parse the agent's prompt trailer; a prompt without one means no references."""
    lines = text.split("\n")
    start = _trailer_start(lines)
    task_lines = lines if start is None else lines[:start]
    first = next((line.strip() for line in task_lines if line.strip()), "")[:_FIRST_LINE_MAX]
    if start is None:
        return PromptInfo(first, "deliverable_files", None, ())
    fields: dict[str, str] = {}
    references: list[str] = []
    root: str | None = None
    for line in lines[start + 1 :]:
        if line.startswith("- ") and root is not None:
            references.append(line[2:])
        elif line.startswith("Reference files (read-only), under ") and line.endswith(":"):
            root = line[len("Reference files (read-only), under ") : -1]
        elif ": " in line:
            key, value = line.split(": ", 1)
            fields.setdefault(key, value)
    workspace = fields.get("Working directory", ".")
    deliverables = fields.get("Deliverables folder", os.path.join(workspace, "deliverable_files"))
    if root is None and references:
        root = os.path.commonpath(references)
    return PromptInfo(first, deliverables, root, tuple(references))


def _trailer_start(lines: list[str]) -> int | None:
    """Index of the last ``---`` line followed by ``Working directory:``."""
    for index in range(len(lines) - 2, -1, -1):
        if lines[index].strip() == "---" and lines[index + 1].startswith("Working directory: "):
            return index
    return None


def tool_outputs(result: str) -> list[str]:
    """Candidate output texts of a tool result: the raw text, plus JSON string fields."""
    outputs = [result]
    try:
        decoded = json.loads(result)
    except ValueError:
        return outputs
    if isinstance(decoded, dict):
        outputs.extend(v for v in decoded.values() if isinstance(v, str))
    return outputs


def parse_listing(result: str, root: str) -> list[str] | None:
    """Files between the listing markers, or None if the listing failed or was cut."""
    prefix = root.rstrip("/") + "/"
    for output in tool_outputs(result):
        lines = output.split("\n")
        if LIST_BEGIN not in lines or LIST_END not in lines:
            continue
        begin = len(lines) - 1 - lines[::-1].index(LIST_BEGIN)
        if LIST_END not in lines[begin:]:
            continue
        body = [line for line in lines[begin + 1 : lines.index(LIST_END, begin)] if line]
        if all(line.startswith(prefix) for line in body):
            return body
    return None


def parse_sizes(result: str) -> dict[str, int | None] | None:
    """The JSON map printed by the sizes step; None means unknown (unreadable) size."""
    for output in tool_outputs(result):
        for line in output.split("\n"):
            if not line.startswith(SIZES_PREFIX):
                continue
            try:
                sizes = json.loads(line[len(SIZES_PREFIX) :])
            except ValueError:
                continue
            if isinstance(sizes, dict) and all(_is_size(v) for v in sizes.values()):
                return sizes
    return None


def _is_size(value: object) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def parse_written(result: str) -> dict[str, Any] | None:
    """The JSON record printed after the deliverable was written."""
    for output in tool_outputs(result):
        for line in output.split("\n"):
            if line.startswith(WROTE_PREFIX):
                try:
                    record = json.loads(line[len(WROTE_PREFIX) :])
                except ValueError:
                    continue
                if isinstance(record, dict) and "path" in record:
                    return record
    return None


def render_inventory(info: PromptInfo, sizes: dict[str, int | None]) -> str:
    """The deliverable's text; ``parse_inventory`` reads it back."""
    lines = ["# Reference inventory", "", f"Task: {info.first_line}"]
    if info.reference_root is None:
        return "\n".join(lines + ["", "No reference files were provided with this task.", ""])
    known = [s for s in sizes.values() if s is not None]
    lines += [
        f"Reference root: {info.reference_root}",
        f"Files seen: {len(sizes)} ({sum(known)} bytes in total)",
        "",
    ]
    for path in sorted(sizes):
        size = sizes[path]
        lines.append(f"- unreadable: {path}" if size is None else f"- {size} bytes: {path}")
    missing = [p for p in info.references if p not in sizes]
    if missing:
        lines += ["", "Named in the prompt but not found:"] + [f"- missing: {p}" for p in missing]
    return "\n".join(lines + [""])


def parse_inventory(text: str) -> dict[str, int]:
    """Map each reference file named in an inventory to its size in bytes."""
    found: dict[str, int] = {}
    for line in text.split("\n"):
        match = _INVENTORY_LINE.match(line)
        if match:
            found[match.group(2)] = int(match.group(1))
    return found


def list_targets(info: PromptInfo) -> list[str]:
    """Folders holding the references, or the root if a reference lies outside it."""
    root = info.reference_root or "/"
    prefix = root.rstrip("/") + "/"
    folders = sorted({os.path.dirname(path) for path in info.references})
    if folders and all(f == root or f.startswith(prefix) for f in folders):
        return folders
    return [root]


def list_command(folders: list[str]) -> str:
    """Bash listing bracketed by markers; a missing folder is skipped (its files are then
    reported missing), any other error lands inside the markers and fails the parse."""
    quoted = " ".join(shlex.quote(folder) for folder in folders)
    loop = f'for d in {quoted}; do if [ -d "$d" ]; then find -L "$d" -type f; fi; done 2>&1'
    return f"echo {LIST_BEGIN}; {loop} | LC_ALL=C sort; echo {LIST_END}"


def sizes_code(paths: list[str]) -> str:
    return (
        "import json, os\n"
        "sizes = {}\n"
        f"for path in {paths!r}:\n"
        "    try:\n"
        "        sizes[path] = os.path.getsize(path)\n"
        "    except OSError:\n"
        "        sizes[path] = None\n"
        f"print({SIZES_PREFIX!r} + json.dumps(sizes))\n"
    )


def write_code(path: str, text: str) -> str:
    return (
        "import json, os\n"
        f"path = {path!r}\n"
        "os.makedirs(os.path.dirname(path) or '.', exist_ok=True)\n"
        "with open(path, 'w', encoding='utf-8') as handle:\n"
        f"    handle.write({text!r})\n"
        f"print({WROTE_PREFIX!r} + json.dumps({{'path': path, 'bytes': os.path.getsize(path)}}))\n"
    )


MADE_PREFIX = "FAKEMODEL-MADE "
MADE_STEM = "scripted_output"

# One maker per file type a prompt may ask for, run in the sandbox's python: each uses what the runtime
# has (the full image's document libraries, ffmpeg) and reports a type it cannot make instead of failing.
_MAKERS = {
    "xlsx": "import openpyxl\nwb = openpyxl.Workbook(); ws = wb.active; ws.title = 'Summary'\n"
    "ws.append(['item', 'value']); ws.append(['first', 2]); ws.append(['second', 3]); ws['A4'] = 'total'; ws['B4'] = '=SUM(B2:B3)'\nwb.save(path)",
    "docx": "import docx\nd = docx.Document(); d.add_heading('Scripted deliverable', 1); d.add_paragraph(TEXT); d.save(path)",
    "pptx": "import pptx\np = pptx.Presentation(); s = p.slides.add_slide(p.slide_layouts[1])\n"
    "s.shapes.title.text = 'Scripted deliverable'; s.placeholders[1].text = TEXT; p.save(path)",
    "pdf": "from reportlab.pdfgen import canvas\nc = canvas.Canvas(path); c.drawString(72, 720, TEXT); c.showPage(); c.save()",
    "csv": "import csv\nwith open(path, 'w', newline='') as f:\n    csv.writer(f).writerows([['item', 'value'], ['first', 2], ['second', 3]])",
    "md": "open(path, 'w').write('# Scripted deliverable\\n\\n' + TEXT + '\\n')",
    "png": "from PIL import Image\nImage.new('RGB', (64, 48), (40, 90, 160)).save(path)",
    "wav": "import wave\nw = wave.open(path, 'wb'); w.setnchannels(1); w.setsampwidth(2); w.setframerate(8000); w.writeframes(bytes(16000)); w.close()",
    "mp3": "import subprocess\nsubprocess.run(['ffmpeg', '-v', 'error', '-f', 'lavfi', '-i', 'sine=d=1', path], check=True)",
    "mp4": "import subprocess\nsubprocess.run(['ffmpeg', '-v', 'error', '-f', 'lavfi', '-i', 'color=d=1:s=64x48', '-pix_fmt', 'yuv420p', path], check=True)",
}


def make_code(folder: str, asked: list[str]) -> str:
    """Python that writes one file of each asked type into `folder` and prints which it made and which
    the runtime could not (a missing library, no ffmpeg): the demo's deliverables beyond the inventory."""
    makers = {ext: _MAKERS[ext] for ext in asked if ext in _MAKERS}
    return (
        "import json as _json, os as _os\n"
        "TEXT = 'Made by the scripted model to show the pipeline end to end; not an answer to the task.'\n"
        f"_made, _not = [], {{}}\n"
        f"for _ext, _code in {makers!r}.items():\n"
        f"    path = _os.path.join({folder!r}, {MADE_STEM!r} + '.' + _ext)\n"
        "    try:\n"
        "        exec(_code)\n"
        "        _made.append(_ext)\n"
        "    except Exception as _exc:\n"
        "        _not[_ext] = f'{type(_exc).__name__}: {_exc}'[:200]\n"
        "        if _os.path.exists(path):\n"
        "            _os.remove(path)\n"
        f"print({MADE_PREFIX!r} + _json.dumps({{'made': _made, 'not_made': _not}}))\n"
    )


def hostile_code(folder: str) -> str:
    """Entries a careless or malicious model might leave: a link out, a link up, a fifo, a 3 MiB file."""
    return (
        "import os as _os\n"
        f"_d = {folder!r}\n"
        "_os.symlink('/etc/passwd', _os.path.join(_d, 'passwd-link'))\n"
        "_os.symlink('..', _os.path.join(_d, 'up'))\n"
        "_os.mkfifo(_os.path.join(_d, 'pipe'))\n"
        "with open(_os.path.join(_d, 'huge.bin'), 'wb') as _f:\n"
        "    _f.truncate(3 * 1024 * 1024)\n"
    )


def find_calls(messages: list[dict[str, Any]]) -> list[Call]:
    """Our tool calls in order, each with its result text (None if not answered)."""
    results = {m["tool_call_id"]: message_text(m.get("content")) for m in messages if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)}
    calls: list[Call] = []
    for message in messages:
        tool_calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        for tool_call in tool_calls if isinstance(tool_calls, list) else []:
            identifier = tool_call.get("id") if isinstance(tool_call, dict) else None
            match = _CALL_ID.match(identifier) if isinstance(identifier, str) else None
            if match and match.group(1) in STEPS:
                calls.append(Call(match.group(1), match.group(3), results.get(identifier)))
            elif isinstance(tool_call, dict) and (step := _step_of(tool_call)):
                calls.append(Call(*step, results.get(identifier) if isinstance(identifier, str) else None))
    return calls


_STEP_MARKS = (("list", LIST_BEGIN), ("sizes", SIZES_PREFIX), ("write", WROTE_PREFIX))


def _step_of(tool_call: dict[str, Any]) -> tuple[str, str] | None:
    """(step, tag) of one of our calls that came back under an id the client made up (the server sent
    none: the no-ids dialect), known by the marker its arguments print."""
    function = tool_call.get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(arguments, str):
        return None
    step = next((name for name, mark in _STEP_MARKS if mark in arguments), None)
    if step is None:
        return None
    if function.get("name") == UNKNOWN_TOOL_NAME:
        return step, "unknowntool"
    try:
        json.loads(arguments)
    except ValueError:
        return step, "malformed"
    return step, "ok"


def _last_parsed(calls: list[Call], step: str, parse: Callable[[str], Any]) -> Any:
    """The newest parsable result of a step: earlier failures of it do not matter."""
    for call in reversed(calls):
        if call.step == step and call.tag == "ok" and call.result is not None:
            parsed = parse(call.result)
            if parsed is not None:
                return parsed
    return None


def offers_tool(tools: Any, name: str) -> bool:
    """Whether a request's ``tools`` list has a function tool of this name."""
    return isinstance(tools, list) and any(
        isinstance(tool, dict) and isinstance(tool.get("function"), dict) and tool["function"].get("name") == name for tool in tools
    )


def plan(messages: list[dict[str, Any]], hostile: bool = False, submit: bool = False, make: bool = False) -> Plan:
    """Decide the next turn from the conversation so far; with ``submit`` the answer is a submit call,
    with ``make`` the write step also makes a file of each type the prompt asks for."""
    turn = _plan(messages, hostile, make)
    if submit and turn.step == "answer":
        return replace(turn, tool=SUBMIT_TOOL, arguments={"answer": turn.text}, text="")
    return turn


def _plan(messages: list[dict[str, Any]], hostile: bool, make: bool = False) -> Plan:
    info = parse_prompt(first_user_text(messages))
    calls = find_calls(messages)
    sizes: dict[str, int | None] = {}
    root = info.reference_root
    if root is not None:
        listing = _last_parsed(calls, "list", lambda r: parse_listing(r, root))
        if listing is None:
            command = list_command(list_targets(info))
            return _tool_plan(messages, calls, "list", "bash", {"command": command})
        measured = _last_parsed(calls, "sizes", parse_sizes)
        if measured is None:
            return _tool_plan(messages, calls, "sizes", "python_exec", {"code": sizes_code(listing)})
        sizes = measured
    if _last_parsed(calls, "write", parse_written) is None:
        path = os.path.join(info.deliverables_dir, DELIVERABLE_NAME)
        code = write_code(path, render_inventory(info, sizes)) + (hostile_code(info.deliverables_dir) if hostile else "")
        if make:
            code += make_code(info.deliverables_dir, asked_types(first_user_text(messages), info.references))
        return _tool_plan(messages, calls, "write", "python_exec", {"code": code})
    return _plan_for(messages, calls, "answer", text=summary(info, sizes))


def _tool_plan(messages: list[dict[str, Any]], calls: list[Call], step: str, tool: str, arguments: dict[str, str]) -> Plan:
    failed = sum(1 for c in calls if c.step == step and c.tag == "ok")
    if failed >= MAX_FAILED_ATTEMPTS:
        text = f"Stopped: the {step} step failed {failed} times, so no inventory was completed."
        return _plan_for(messages, calls, "answer", text=text)
    return _plan_for(messages, calls, step, tool=tool, arguments=arguments)


def _plan_for(messages: list[dict[str, Any]], calls: list[Call], step: str, **turn: Any) -> Plan:
    attempt = sum(1 for c in calls if c.step == step)
    faults = sum(1 for c in calls if c.step == step and c.tag != "ok")
    return Plan(conversation_id(messages), step, attempt, faults, **turn)


def summary(info: PromptInfo, sizes: dict[str, int | None]) -> str:
    """The final answer: what was inventoried and where it went."""
    if info.reference_root is None:
        return f"The task has no reference files; wrote {DELIVERABLE_NAME} saying so."
    noun = "file" if len(sizes) == 1 else "files"
    text = f"Inventoried {len(sizes)} reference {noun} into {DELIVERABLE_NAME}."
    missing = sum(1 for p in info.references if p not in sizes)
    if missing:
        text += f" {missing} named in the prompt were not found."
    return text


def call_id(plan_: Plan, fault: str | None) -> str:
    digest = hashlib.sha256(f"{plan_.conversation}|{plan_.step}|{plan_.attempt}".encode()).hexdigest()
    return f"call_fm_{plan_.step}_{plan_.attempt}_{_FAULT_TAGS[fault]}_{digest[:12]}"


def render_message(plan_: Plan, fault: str | None = None) -> dict[str, Any]:
    """The assistant message in OpenAI's shape, with a content fault applied if asked."""
    if plan_.tool is None:
        return {"role": "assistant", "content": plan_.text}
    if fault is not None and fault not in CONTENT_FAULTS:
        raise ValueError(f"not a content fault: {fault}")
    name = UNKNOWN_TOOL_NAME if fault == "unknown_tool" else plan_.tool
    arguments = json.dumps(plan_.arguments)
    if fault == "malformed":
        arguments = arguments[: len(arguments) // 2]
    function = {"name": name, "arguments": arguments}
    tool_call = {"id": call_id(plan_, fault), "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


def next_message(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The fault-free next assistant message."""
    return render_message(plan(messages))


def validate_faults(faults: object) -> dict[str, float]:
    """Check a fault map: known kinds, probabilities in [0, 1], summing to at most 1."""
    if not isinstance(faults, dict):
        raise ValueError("faults must be an object mapping fault kind to probability")
    checked: dict[str, float] = {}
    for kind, probability in faults.items():
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(FAULT_KINDS)}")
        if isinstance(probability, bool) or not isinstance(probability, (int, float)):
            raise ValueError(f"fault {kind!r} probability must be a number")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"fault {kind!r} probability must be between 0 and 1")
        checked[kind] = float(probability)
    if sum(checked.values()) > 1.0 + 1e-9:
        raise ValueError("fault probabilities must sum to at most 1")
    return checked


def decide_fault(faults: dict[str, float], seed: int, plan_: Plan) -> str | None:
    """At most one fault per turn, a pure function of (seed, conversation, step, attempt)."""
    key = f"{seed}|{plan_.conversation}|{plan_.step}|{plan_.attempt}".encode()
    draw = int(hashlib.sha256(key).hexdigest()[:13], 16) / 16**13
    threshold = 0.0
    for kind in FAULT_KINDS:
        threshold += faults.get(kind, 0.0)
        if draw < threshold:
            return None if kind in CONTENT_FAULTS and plan_.tool is None else kind
    return None


SCRIPT_CALL_PREFIX = "call_fs_"
SCRIPT_DONE = "Script finished."
TOOL_FIELDS = {"bash": "command", "python_exec": "code", "view": "path"}
PNG_DATA_URL = "data:image/png;base64,"


def validate_script(steps: object) -> list[tuple[str, str]]:
    """A chosen sequence of tool calls: a list of {"bash": command}, {"python_exec": code} or {"view": path} objects."""
    if not isinstance(steps, list) or not steps:
        raise ValueError("the script must be a non-empty array of {tool: argument} objects")
    checked = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or len(step) != 1:
            raise ValueError(f"step {index} must be an object with exactly one tool")
        ((tool, argument),) = step.items()
        if tool not in TOOL_FIELDS or not isinstance(argument, str):
            raise ValueError(f"step {index}: the tool must be one of {', '.join(TOOL_FIELDS)} with a string argument")
        checked.append((tool, argument))
    return checked


def scripted_message(messages: list[dict[str, Any]], steps: list[tuple[str, str]]) -> dict[str, Any]:
    """The next call of the script (one per assistant turn already played), then a text answer."""
    played = sum(
        1
        for m in messages
        if m.get("role") == "assistant" and any(isinstance(c, dict) and str(c.get("id", "")).startswith(SCRIPT_CALL_PREFIX) for c in m.get("tool_calls") or [])
    )
    if played >= len(steps):
        return {"role": "assistant", "content": SCRIPT_DONE + pictures_seen(messages)}
    tool, argument = steps[played]
    arguments = json.dumps({TOOL_FIELDS[tool]: argument})
    call = {"id": f"{SCRIPT_CALL_PREFIX}{played}", "type": "function", "function": {"name": tool, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def pictures_seen(messages: list[dict[str, Any]]) -> str:
    """What a vision model saw: each picture of the user messages as PNG width x height (the scripted
    check that pictures arrived whole); empty when there were none."""
    sizes = [png_size(url) for url in image_urls(messages)]
    if not sizes:
        return ""
    return f" Pictures seen: {len(sizes)} ({', '.join('unreadable' if size is None else f'PNG {size[0]}x{size[1]}' for size in sizes)})."


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """The URL of every image part of the user messages, in order."""
    return [
        str((part.get("image_url") or {}).get("url", ""))
        for m in messages
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


def png_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a whole PNG data URL (signature, IHDR first, IEND last); None when it is not one."""
    if not url.startswith(PNG_DATA_URL):
        return None
    try:
        head = base64.b64decode(url[len(PNG_DATA_URL) :], validate=True)
    except ValueError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR" or head[-8:-4] != b"IEND":
        return None
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")

"""The scripted model's pure logic: prompt parsing, steps, recovery, faults."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from gdpval.fakemodel import script

ROOT = "/reference_files"
NASTY = [
    f"{ROOT}/0a1b/Budget (final) & notes.xlsx",
    f"{ROOT}/9f3c/Über résumé – 报告.docx",
    f"{ROOT}/9f3c/it's $HOME `x`.txt",
]


def prompt(references: list[str] | None, root: str = ROOT, task: str = "Prepare the quarterly report.") -> str:
    lines = [task, "", "---", "Working directory: /workspace", "Deliverables folder: /workspace/deliverable_files"]
    if references:
        lines.append(f"Reference files (read-only), under {root}:")
        lines += [f"- {path}" for path in references]
    else:
        lines.append("Reference files: none")
    lines.append("Save every file the task asks for in the deliverables folder.")
    return "\n".join(lines)


def start(references: list[str] | None, **kwargs: Any) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be useful."}, {"role": "user", "content": prompt(references, **kwargs)}]


def reply(messages: list[dict[str, Any]], output: str, fault: str | None = None) -> dict[str, Any]:
    """Append the next assistant turn and a tool result with ``output``; return the turn."""
    message = script.render_message(script.plan(messages), fault)
    messages.append(message)
    call = message["tool_calls"][0]
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return message


def listing_output(paths: list[str]) -> str:
    return "\n".join([script.LIST_BEGIN, *paths, script.LIST_END, "[exit code 0]"])


def sizes_output(sizes: dict[str, int | None]) -> str:
    return f"{script.SIZES_PREFIX}{json.dumps(sizes)}\n[exit code 0]"


def wrote_output() -> str:
    return script.WROTE_PREFIX + json.dumps({"path": "/workspace/deliverable_files/x", "bytes": 1}) + "\n[exit code 0]"


def run_code(code: str, cwd: Path) -> str:
    """Execute generated python_exec code in-process and return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(cwd):
        exec(compile(code, "<python_exec>", "exec"), {})
    return out.getvalue()


def arguments(message: dict[str, Any]) -> dict[str, str]:
    return json.loads(message["tool_calls"][0]["function"]["arguments"])


def test_parse_prompt_reads_trailer_with_hostile_paths():
    info = script.parse_prompt(prompt(NASTY, task="Ünïcode task\nsecond line\n---\nnot the trailer"))
    assert info.first_line == "Ünïcode task"
    assert info.deliverables_dir == "/workspace/deliverable_files"
    assert info.reference_root == ROOT
    assert info.references == tuple(NASTY)


def test_parse_prompt_without_references_or_trailer():
    assert script.parse_prompt(prompt(None)).reference_root is None
    bare = script.parse_prompt("\n\n  hello there  \n")
    assert (bare.first_line, bare.reference_root, bare.deliverables_dir) == ("hello there", None, "deliverable_files")


def test_step_one_lists_reference_folders_quoted_safely():
    root = "/tmp/refs & (copies)/ü"
    message = script.next_message(start([f"{root}/h1/a.txt", f"{root}/h0/b c.txt", f"{root}/h1/d.txt"], root=root))
    call = message["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert call["id"].startswith("call_fm_list_0_ok_")
    words = shlex.split(arguments(message)["command"])
    assert words[words.index("in") + 1 : words.index("in") + 3] == [f"{root}/h0", f"{root}/h1;"]


def test_listing_falls_back_to_root_for_references_outside_it():
    info = script.parse_prompt(prompt(["/elsewhere/a.txt", f"{ROOT}/h/b.txt"]))
    assert script.list_targets(info) == [ROOT]


def test_step_two_prints_sizes_of_listed_files(tmp_path: Path):
    root = tmp_path / "refs & (x)"
    files = [root / "a b.txt", root / "sub" / "é (1).bin"]
    for index, path in enumerate(files):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * (index + 3))
    messages = start([str(p) for p in files], root=str(root))
    reply(messages, listing_output(sorted(str(p) for p in files)))
    message = script.next_message(messages)
    assert message["tool_calls"][0]["function"]["name"] == "python_exec"
    printed = run_code(arguments(message)["code"], tmp_path)
    assert script.parse_sizes(printed) == {str(files[0]): 3, str(files[1]): 4}


def test_step_three_writes_inventory_that_parses_back(tmp_path: Path):
    sizes: dict[str, int | None] = {NASTY[0]: 10, NASTY[1]: 0, NASTY[2]: None}
    messages = start(NASTY + [f"{ROOT}/gone.pdf"])
    messages[1]["content"] = messages[1]["content"].replace("/workspace", str(tmp_path))
    reply(messages, listing_output(sorted(sizes)))
    reply(messages, sizes_output(sizes))
    message = script.next_message(messages)
    assert script.parse_written(run_code(arguments(message)["code"], tmp_path)) is not None
    text = (tmp_path / "deliverable_files" / script.DELIVERABLE_NAME).read_text(encoding="utf-8")
    assert text.startswith("# Reference inventory\n\nTask: Prepare the quarterly report.\n")
    assert script.parse_inventory(text) == {NASTY[0]: 10, NASTY[1]: 0}
    assert f"- unreadable: {NASTY[2]}" in text and f"- missing: {ROOT}/gone.pdf" in text


def test_final_answer_summarises():
    messages = start(NASTY)
    reply(messages, listing_output(NASTY))
    reply(messages, sizes_output({p: 1 for p in NASTY}))
    reply(messages, wrote_output())
    final = script.next_message(messages)
    assert final == {"role": "assistant", "content": "Inventoried 3 reference files into reference_inventory.md."}
    assert script.plan(messages).step == "answer"


SUBMIT_OFFERED = [{"type": "function", "function": {"name": name}} for name in ("bash", "python_exec", "submit")]


def test_offered_submit_tool_is_recognised():
    assert script.offers_tool(SUBMIT_OFFERED, "submit")
    assert not script.offers_tool(SUBMIT_OFFERED[:2], "submit")
    assert not script.offers_tool([None, {"function": "submit"}, {"name": "submit"}], "submit")
    assert not script.offers_tool(None, "submit")


def test_final_answer_goes_through_submit_when_offered():
    messages = start(NASTY)
    reply(messages, listing_output(NASTY))
    reply(messages, sizes_output({p: 1 for p in NASTY}))
    reply(messages, wrote_output())
    turn = script.plan(messages, submit=True)
    assert (turn.step, turn.tool, turn.text) == ("answer", "submit", "")
    final = script.render_message(turn)
    assert final["tool_calls"][0]["function"]["name"] == "submit" and final["tool_calls"][0]["id"].startswith("call_fm_answer_0_ok_")
    assert arguments(final) == {"answer": "Inventoried 3 reference files into reference_inventory.md."}
    assert script.plan(messages, submit=True).step == "answer" and script.plan(messages[:-2], submit=True).tool == "python_exec"


def test_a_refused_submit_is_made_again():
    messages = start(None)
    reply(messages, wrote_output())
    refused = script.render_message(script.plan(messages, submit=True), "malformed")
    messages += [refused, {"role": "tool", "tool_call_id": refused["tool_calls"][0]["id"], "content": "error: not valid JSON"}]
    turn = script.plan(messages, submit=True)
    assert (turn.step, turn.attempt, turn.tool) == ("answer", 1, "submit")


def test_task_without_references_writes_then_answers(tmp_path: Path):
    messages = start(None)
    first = script.next_message(messages)
    code = arguments(first)["code"].replace("/workspace", str(tmp_path))
    written = run_code(code, tmp_path)
    text = (tmp_path / "deliverable_files" / script.DELIVERABLE_NAME).read_text(encoding="utf-8")
    assert "No reference files were provided" in text and script.parse_inventory(text) == {}
    messages += [first, {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": written}]
    assert "no reference files" in script.next_message(messages)["content"]


@pytest.mark.parametrize(
    "bad_result",
    [
        'error: the arguments are not valid JSON (Expecting value); send {"command": "..."}',
        f"{script.LIST_BEGIN}\nfind: '/reference_files': No such file or directory\n{script.LIST_END}\n[exit code 0]",
        f"{script.LIST_BEGIN}\n{ROOT}/a.txt\n[... 4000 characters cut ...]\n{ROOT}/z.txt\n{script.LIST_END}\n[exit code 0]",
        f"{script.LIST_BEGIN}\n{ROOT}/a.txt\n[timed out after 180 s; the command was killed]",
    ],
)
def test_failed_step_is_reissued_then_abandoned(bad_result: str):
    messages = start(NASTY)
    for attempt in range(script.MAX_FAILED_ATTEMPTS):
        turn = script.plan(messages)
        assert (turn.step, turn.attempt, turn.tool) == ("list", attempt, "bash")
        reply(messages, bad_result)
    final = script.next_message(messages)
    assert "tool_calls" not in final and "list step failed 3 times" in final["content"]


def test_error_echoing_the_code_is_not_taken_for_success():
    messages = start(NASTY)
    reply(messages, listing_output(NASTY))
    code = arguments(script.next_message(messages))["code"]
    reply(messages, f"Traceback (most recent call last):\n{code}\nNameError: boom\n[exit code 1]")
    assert script.plan(messages).step == "sizes"


def test_json_wrapped_tool_result_is_understood():
    messages = start(NASTY)
    reply(messages, json.dumps({"output": listing_output(NASTY), "exit_code": 0}))
    assert script.plan(messages).step == "sizes"


@pytest.mark.parametrize("fault", script.CONTENT_FAULTS)
def test_content_fault_then_recovery(fault: str):
    messages = start(NASTY)
    faulty = reply(messages, "error: rejected by the agent", fault)
    call = faulty["tool_calls"][0]
    if fault == "malformed":
        with pytest.raises(ValueError):
            json.loads(call["function"]["arguments"])
    else:
        assert call["function"]["name"] == script.UNKNOWN_TOOL_NAME
    turn = script.plan(messages)
    assert (turn.step, turn.attempt, turn.content_faults) == ("list", 1, 1)
    assert script.render_message(turn)["tool_calls"][0]["function"]["name"] == "bash"


def test_answer_turn_cannot_carry_content_fault():
    messages = start(None)
    reply(messages, wrote_output())
    turn = script.plan(messages)
    assert script.decide_fault({"malformed": 1.0}, 0, turn) is None
    assert script.decide_fault({"429": 1.0}, 0, turn) == "429"


def test_odd_message_shapes_are_tolerated():
    messages = start(NASTY) + [
        {"role": "assistant", "content": [{"type": "text", "text": "thinking"}], "tool_calls": {"id": 1}},
        {"role": "assistant", "tool_calls": [None, {"id": 7}, {"id": "call_someone_else"}]},
        {"role": "tool", "tool_call_id": ["x"], "content": None},
    ]
    assert script.plan(messages).step == "list"
    assert script.plan([{"role": "user", "content": [{"type": "text", "text": prompt(None)}]}]).step == "write"


def test_conversation_identity_ignores_system_message():
    one, two = start(NASTY), start(NASTY)
    two[0]["content"] = "A different system prompt."
    assert script.conversation_id(one) == script.conversation_id(two)
    assert script.conversation_id(one) != script.conversation_id(start(NASTY[:1]))


def test_fault_decisions_are_deterministic_and_calibrated():
    faults = {"429": 0.2, "500": 0.1, "malformed": 0.1, "slow": 0.1}
    plans = [script.plan(start([f"{ROOT}/t{i}/file.txt"])) for i in range(2000)]
    first = [script.decide_fault(faults, 7, p) for p in plans]
    assert first == [script.decide_fault(faults, 7, p) for p in plans]
    assert first != [script.decide_fault(faults, 8, p) for p in plans]
    for kind, probability in faults.items():
        assert abs(first.count(kind) / len(plans) - probability) < 0.04
    assert all(script.decide_fault({"500": 1.0}, s, p) == "500" for s in range(3) for p in plans[:50])
    assert all(script.decide_fault({}, 0, p) is None for p in plans[:50])


def test_attempts_draw_independently():
    messages = start(NASTY)
    draws = set()
    for _ in range(20):
        draws.add(script.decide_fault({"500": 0.5}, 0, script.plan(messages)))
        reply(messages, "error: try again", "malformed")
    assert draws == {None, "500"}


@pytest.mark.parametrize(
    "faults",
    [{"teapot": 0.1}, {"429": 1.5}, {"429": "often"}, {"429": True}, {"429": 0.6, "500": 0.6}, ["429"]],
)
def test_invalid_fault_maps_are_refused(faults: Any):
    with pytest.raises(ValueError):
        script.validate_faults(faults)


def test_inventory_roundtrip_and_strict_parse():
    info = script.parse_prompt(prompt(NASTY))
    sizes = {path: index * 1000 for index, path in enumerate(NASTY)}
    text = script.render_inventory(info, sizes)
    assert script.parse_inventory(text) == sizes
    assert "Files seen: 3 (3000 bytes in total)" in text
    assert script.parse_inventory("- 12 bytes:\n- twelve bytes: /x\n* 3 bytes: /y") == {}


def test_make_code_makes_each_asked_type_it_can_and_names_the_rest(tmp_path, capsys):
    from gdpval.fakemodel.script import MADE_PREFIX, MADE_STEM, make_code

    asked = ["xlsx", "docx", "pptx", "pdf", "csv", "md", "png", "wav"]
    exec(make_code(str(tmp_path), asked), {})
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith(MADE_PREFIX)]
    record = json.loads(line[len(MADE_PREFIX) :])
    assert sorted(record["made"] + list(record["not_made"])) == sorted(asked)
    assert {"csv", "md", "wav"} <= set(record["made"])  # the standard library's: made in any runtime
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{MADE_STEM}.{ext}" for ext in record["made"])
    if "xlsx" in record["made"]:
        import openpyxl

        assert openpyxl.load_workbook(tmp_path / f"{MADE_STEM}.xlsx")["Summary"]["B4"].value == "=SUM(B2:B3)"

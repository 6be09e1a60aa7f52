"""Tool-call parsing and rendering: what the model is told when it gets a call wrong."""

import json

import pytest

from gdpval.agent.tools import TOOLS, ParsedCall, applied_timeout, parse_call, render_result, tools_for


def test_tools_offered_are_bash_and_python_exec():
    assert [t["function"]["name"] for t in TOOLS] == ["bash", "python_exec"]
    assert TOOLS[0]["function"]["parameters"]["required"] == ["command"]


def test_valid_calls_parse():
    assert parse_call("bash", '{"command": "ls -la"}').argument == "ls -la"
    assert parse_call("python_exec", '{"code": "print(1)"}').argument == "print(1)"


def test_malformed_json_is_explained():
    call = parse_call("bash", '{"command": "ls')
    assert call.problem.startswith("error: the arguments are not valid JSON")
    assert '"command"' in call.problem


def test_unknown_tool_lists_the_real_ones():
    call = parse_call("rm_rf", "{}")
    assert "unknown tool 'rm_rf'" in call.problem and "bash, python_exec" in call.problem


def test_wrong_argument_type_and_non_object():
    assert "string argument 'code'" in parse_call("python_exec", '{"code": 3}').problem
    assert "string argument 'command'" in parse_call("bash", "[1, 2]").problem


def test_render_result_shows_exit_code_and_timeout():
    assert render_result("hello\n", 0, False, 180) == "hello\n[exit code 0]"
    assert render_result("", 2, False, 180) == "[exit code 2]"
    assert "timed out after 5 s" in render_result("partial", -9, True, 5)


def test_work_tools_take_an_optional_numeric_timeout():
    for tool in TOOLS:
        parameters = tool["function"]["parameters"]
        assert parameters["properties"]["timeout"]["type"] == "number"
        assert "timeout" not in parameters["required"]


def test_submit_is_offered_only_when_a_sample_ends_by_submitting():
    assert [t["function"]["name"] for t in tools_for("answer")] == ["bash", "python_exec"]
    submit = tools_for("submit")[-1]["function"]
    assert submit["name"] == "submit" and submit["parameters"]["required"] == ["answer"]
    assert "timeout" not in submit["parameters"]["properties"]


def test_timeout_is_parsed_and_checked():
    assert parse_call("bash", '{"command": "make", "timeout": 900}').timeout == 900
    assert parse_call("bash", '{"command": "make"}').timeout is None
    for bad in ('"60"', "0", "-5", "true", "NaN", "Infinity"):
        assert "'timeout' must be a positive number" in parse_call("python_exec", f'{{"code": "1", "timeout": {bad}}}').problem


@pytest.mark.parametrize(
    "requested, remaining, applied",
    [
        (None, 10_000, 180),  # no request: the default
        (30, 10_000, 30),  # a shorter request is honoured
        (900, 10_000, 600),  # a longer one gets the cap
        (900, 100, 100),  # and never more than the sample has left
        (None, 50, 50),
    ],
)
def test_applied_timeout(requested, remaining, applied):
    assert applied_timeout(requested, default=180, cap=600, remaining=remaining) == applied


def test_submit_is_unknown_unless_offered():
    assert "available tools: bash, python_exec" in parse_call("submit", '{"answer": "x"}').problem
    offered = ("bash", "python_exec", "submit")
    assert parse_call("submit", '{"answer": "Done."}', offered).argument == "Done."
    assert "string argument 'answer'" in parse_call("submit", "{}", offered).problem


def test_raw_control_characters_in_strings_are_accepted_and_flagged():
    code = 'print(1)\nprint("a\tb")'
    escaped = json.dumps({"code": code})
    assert parse_call("python_exec", escaped) == ParsedCall("python_exec", argument=code)
    raw = escaped.replace("\\n", "\n").replace("\\t", "\t")  # what llama.cpp may send: real newline and tab
    assert parse_call("python_exec", raw) == ParsedCall("python_exec", argument=code, repaired=True)


def test_a_flood_reaches_the_model_as_head_and_tail_within_the_cap() -> None:
    from gdpval.agent.tools import MAX_RESULT_CHARS, capped

    flood = "HEAD" + "x" * 50_000_000 + "TAIL"
    shown = render_result(flood, 0, False, 10)
    assert len(shown) <= MAX_RESULT_CHARS and shown.startswith("HEAD") and shown.endswith("TAIL\n[exit code 0]")
    assert "characters omitted by the harness" in shown
    assert capped("short") == "short" and len(capped("y" * 100_001, 1000)) <= 1000

"""Tool-call parsing and rendering: what the model is told when it gets a call wrong."""

from gdpval.agent.tools import TOOLS, parse_call, render_result


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

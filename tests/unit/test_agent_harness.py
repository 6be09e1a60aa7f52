"""The harness conventions inside the agent loop: a model's own tool timeout (capped, recorded),
leniently parsed arguments, the `submit` finish with its nudge, and a conversation without a
system message. Driven like test_agent_loop: a stand-in endpoint and a fake clock, no sleeping."""

from __future__ import annotations

import json

from test_agent_loop import ANSWER, START, FakeClock, StandIn, Tools, completion

from gdpval.agent.loop import AgentLoop, AgentSettings, ModelSettings
from gdpval.agent.transcript import Transcript


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(*calls: dict):
    return completion({"content": None, "tool_calls": list(calls)})


def run(tmp_path, fake: FakeClock, model: StandIn, tools: Tools, deadline: float = float("inf"), **agent) -> tuple:
    """The outcome and the transcript's events."""
    path = tmp_path / "transcript.jsonl"
    with Transcript(path) as transcript:
        loop = AgentLoop(model.client(), ModelSettings(name="scripted"), AgentSettings(**agent), tools, transcript, deadline, fake.clock())
        outcome = loop.run("system", "user")
    return outcome, [json.loads(line) for line in path.read_text().splitlines()]


def of_kind(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def test_a_timeout_above_the_cap_gets_the_cap_and_the_transcript_records_both(tmp_path):
    fake = FakeClock()
    model = StandIn(fake, [turn(tool_call("bash", '{"command": "make", "timeout": 5000}')),
                           turn(tool_call("python_exec", '{"code": "1", "timeout": 12.5}')),
                           turn(tool_call("bash", '{"command": "ls"}')), ANSWER])
    tools = Tools(fake)
    outcome, events = run(tmp_path, fake, model, tools, command_timeout_seconds=60, max_command_timeout_seconds=900)
    assert outcome.steps == 4
    assert [(args["timeout"], timeout) for _, args, timeout in tools.calls] == [(900, 900), (12.5, 12.5), (60, 60)]
    results = of_kind(events, "tool_result")
    assert [(r["timeout_requested"], r["timeout_applied"]) for r in results] == [(5000, 900), (12.5, 12.5), (None, 60)]


def test_a_requested_timeout_never_outlasts_the_sample(tmp_path):
    fake = FakeClock()
    model = StandIn(fake, [turn(tool_call("bash", '{"command": "make", "timeout": 500}')), ANSWER], latency=1)
    tools = Tools(fake)
    _, events = run(tmp_path, fake, model, tools, deadline=START + 100)
    assert [timeout for _, _, timeout in tools.calls] == [99]
    assert (of_kind(events, "tool_result")[0]["timeout_requested"], of_kind(events, "tool_result")[0]["timeout_applied"]) == (500, 99)


def test_arguments_with_raw_newlines_run_and_are_marked_repaired(tmp_path):
    fake = FakeClock()
    model = StandIn(fake, [turn(tool_call("python_exec", '{"code": "print(1)\nprint(2)"}')), ANSWER])
    tools = Tools(fake)
    outcome, events = run(tmp_path, fake, model, tools)
    assert tools.calls[0][1]["code"] == "print(1)\nprint(2)"
    result = of_kind(events, "tool_result")[0]
    assert (result["repaired_arguments"], result["rejected"], outcome.text) == (True, False, "All done.")


def test_a_bad_timeout_is_explained_to_the_model_and_nothing_runs(tmp_path):
    fake = FakeClock()
    model = StandIn(fake, [turn(tool_call("bash", '{"command": "ls", "timeout": "soon"}')), ANSWER])
    tools = Tools(fake)
    _, events = run(tmp_path, fake, model, tools)
    result = of_kind(events, "tool_result")[0]
    assert tools.calls == [] and result["rejected"] and "'timeout' must be a positive number" in result["content"]
    assert result["timeout_applied"] is None

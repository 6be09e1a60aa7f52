"""The harness conventions inside the agent loop: a model's own tool timeout (capped, recorded),
leniently parsed arguments, the `submit` finish with its nudge, and a conversation without a
system message. Driven like test_agent_loop: a stand-in endpoint and a fake clock, no sleeping."""

from __future__ import annotations

import json

from gdpval.agent.loop import AgentLoop, AgentSettings, ModelSettings
from gdpval.agent.prompt import NUDGE
from gdpval.agent.transcript import Transcript
from support.agent_loop import ANSWER, START, FakeClock, StandIn, Tools, completion


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def turn(*calls: dict):
    return completion({"content": None, "tool_calls": list(calls)})


class Recording(StandIn):
    """The stand-in endpoint, keeping every request body."""

    def __init__(self, fake: FakeClock, replies: list, latency: float = 0.0) -> None:
        super().__init__(fake, replies, latency)
        self.bodies: list[dict] = []

    def handle(self, request):
        self.bodies.append(json.loads(request.content))
        return super().handle(request)


def run(
    tmp_path, fake: FakeClock, model: StandIn, tools: Tools, deadline: float = float("inf"), finish: str = "answer", system: str | None = "system", **agent
) -> tuple:
    """The outcome and the transcript's events."""
    path = tmp_path / "transcript.jsonl"
    with Transcript(path) as transcript:
        loop = AgentLoop(model.client(), ModelSettings(name="scripted"), AgentSettings(**agent), tools, transcript, deadline, fake.clock(), finish)
        outcome = loop.run(system, "user")
    return outcome, [json.loads(line) for line in path.read_text().splitlines()]


def of_kind(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def test_a_timeout_above_the_cap_gets_the_cap_and_the_transcript_records_both(tmp_path):
    fake = FakeClock()
    model = StandIn(
        fake,
        [
            turn(tool_call("bash", '{"command": "make", "timeout": 5000}')),
            turn(tool_call("python_exec", '{"code": "1", "timeout": 12.5}')),
            turn(tool_call("bash", '{"command": "ls"}')),
            ANSWER,
        ],
    )
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


SUBMIT = turn(tool_call("submit", '{"answer": "Report saved as report.docx."}', "call_9"))


def test_submit_ends_the_sample_with_its_answer_and_skips_later_calls(tmp_path):
    fake = FakeClock()  # the answer carries a raw newline, as llama.cpp sends them: accepted, marked repaired
    both = turn(
        tool_call("bash", '{"command": "ls"}', "call_1"),
        tool_call("submit", '{"answer": "Done:\nall"}', "call_2"),
        tool_call("bash", '{"command": "rm -rf x"}', "call_3"),
    )
    model, tools = Recording(fake, [both]), Tools(fake)
    outcome, events = run(tmp_path, fake, model, tools, finish="submit")
    assert (outcome.status.value, outcome.text, outcome.steps) == ("succeeded", "Done:\nall", 1)
    assert [args["command"] for _, args, _ in tools.calls] == ["ls"]
    assert of_kind(events, "submit")[0] | {"t": 0} == {
        "t": 0,
        "event": "submit",
        "id": "call_2",
        "answer": "Done:\nall",
        "repaired_arguments": True,
        "ignored": ["call_3"],
    }
    assert [t["function"]["name"] for t in model.bodies[0]["tools"]] == ["bash", "python_exec", "submit"]


def test_a_reply_without_a_tool_call_is_nudged_and_counts_as_a_step(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [ANSWER, completion({"content": None}), SUBMIT])
    outcome, events = run(tmp_path, fake, model, Tools(fake), finish="submit")
    assert (outcome.status.value, outcome.text, outcome.steps) == ("succeeded", "Report saved as report.docx.", 3)
    assert len(of_kind(events, "nudge")) == 2
    last = model.bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[2]["content"] == "All done." and last[3]["content"] == last[5]["content"] == NUDGE
    assert "\n" not in NUDGE and "submit" in NUDGE


def test_nudges_do_not_outlast_max_steps(tmp_path):
    fake = FakeClock()
    outcome, _ = run(tmp_path, fake, Recording(fake, [ANSWER]), Tools(fake), finish="submit", max_steps=4)
    assert (outcome.status.value, outcome.error_kind.value, outcome.steps) == ("failed", "max_steps", 4)


def test_a_bad_submit_is_explained_and_submit_is_unknown_when_answering(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [turn(tool_call("submit", '{"summary": "x"}')), SUBMIT])
    outcome, events = run(tmp_path, fake, model, Tools(fake), finish="submit")
    assert "submit needs a string argument 'answer'" in of_kind(events, "tool_result")[0]["content"]
    assert outcome.text == "Report saved as report.docx."
    fake = FakeClock()
    model = Recording(fake, [SUBMIT, ANSWER])
    outcome, events = run(tmp_path / "answer", fake, model, Tools(fake))
    assert "unknown tool 'submit'" in of_kind(events, "tool_result")[0]["content"] and outcome.text == "All done."
    assert [t["function"]["name"] for t in model.bodies[0]["tools"]] == ["bash", "python_exec"]


def test_no_system_message_is_sent_when_there_is_none(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [ANSWER])
    _, events = run(tmp_path, fake, model, Tools(fake), system=None)
    assert model.bodies[0]["messages"] == [{"role": "user", "content": "user"}]
    assert events[0]["system"] is None

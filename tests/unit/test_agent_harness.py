"""The harness conventions inside the agent loop: a model's own tool timeout (capped, recorded),
leniently parsed arguments, the `submit` finish with its nudge, and a conversation without a
system message. Driven like test_agent_loop: a stand-in endpoint and a fake clock, no sleeping."""

from __future__ import annotations

import json

from gdpval.agent.loop import AgentLoop, AgentSettings, ModelSettings
from gdpval.agent.prompt import CUT_OFF, ELIDED, NUDGE
from gdpval.agent.tools import CUT_OFF_CALL
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
    tmp_path,
    fake: FakeClock,
    model: StandIn,
    tools: Tools,
    deadline: float = float("inf"),
    finish: str = "answer",
    system: str | None = "system",
    endpoint: dict | None = None,
    **agent,
) -> tuple:
    """The outcome and the transcript's events; `endpoint` holds ModelSettings fields."""
    path = tmp_path / "transcript.jsonl"
    settings = ModelSettings(name="scripted", **(endpoint or {}))
    with Transcript(path) as transcript:
        loop = AgentLoop(model.client(), settings, AgentSettings(**agent), tools, transcript, deadline, fake.clock(), finish)
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


def test_the_last_nudge_is_not_recorded_when_max_steps_ends_the_sample_first(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [ANSWER])
    outcome, events = run(tmp_path, fake, model, Tools(fake), finish="submit", max_steps=2)
    assert (outcome.error_kind.value, len(model.bodies)) == ("max_steps", 2)
    assert len(of_kind(events, "nudge")) == 1  # the one sent with the second request; none after it


# Replies cut off by the token limit (finish_reason "length") are never a final answer.


def cut(message: dict):
    response = completion(message)
    payload = json.loads(response.content)
    payload["choices"][0]["finish_reason"] = "length"
    return type(response)(200, json=payload)


def test_a_cut_off_reply_is_not_an_answer_the_model_is_told_and_carries_on(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [cut({"content": "Here is the summ"}), ANSWER])
    outcome, events = run(tmp_path, fake, model, Tools(fake))
    assert (outcome.status.value, outcome.text, outcome.steps, outcome.finish_reason) == ("succeeded", "All done.", 2, "stop")
    assert [e["finish_reason"] for e in of_kind(events, "response")] == ["length", "stop"]
    sent = model.bodies[1]["messages"][-2:]
    assert sent == [{"role": "assistant", "content": "Here is the summ"}, {"role": "user", "content": CUT_OFF}]
    assert of_kind(events, "cut_off")[0]["content"] == CUT_OFF and of_kind(events, "end")[0]["finish_reason"] == "stop"


def test_replies_cut_off_again_and_again_end_the_sample_as_truncated(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [cut({"content": "Here is"})])
    outcome, _ = run(tmp_path, fake, model, Tools(fake), endpoint={"max_tokens": 256})
    assert (outcome.status.value, outcome.error_kind.value, outcome.steps, outcome.finish_reason) == ("failed", "truncated", 3, "length")
    assert "max_tokens=256" in outcome.error and model.bodies[0]["max_tokens"] == 256


def test_a_cut_off_reply_at_the_step_limit_ends_as_truncated(tmp_path):
    fake = FakeClock()
    outcome, events = run(tmp_path, fake, Recording(fake, [cut({"content": "Here is"})]), Tools(fake), max_steps=1)
    assert (outcome.error_kind.value, of_kind(events, "cut_off")) == ("truncated", [])


def test_a_call_cut_off_inside_its_arguments_is_not_run_and_the_model_is_told(tmp_path):
    fake = FakeClock()
    whole, broken = tool_call("bash", '{"command": "ls"}', "c1"), tool_call("python_exec", '{"code": "open(\'report', "c2")
    model, tools = Recording(fake, [cut({"content": None, "tool_calls": [whole, broken]}), ANSWER]), Tools(fake)
    outcome, events = run(tmp_path, fake, model, tools)
    assert [args for _, args, _ in tools.calls] == [{"command": "ls", "timeout": 180}]
    results = of_kind(events, "tool_result")
    assert results[1]["content"] == CUT_OFF_CALL and results[1]["rejected"]
    assert outcome.text == "All done."


# Dialects of real servers.


def test_parallel_calls_all_run_and_are_answered_in_order_under_their_ids(tmp_path):
    fake = FakeClock()
    calls = [tool_call("bash", '{"command": "a"}', "c1"), tool_call("python_exec", '{"code": "b"}', "c2"), tool_call("bash", '{"command": "c"}', "c3")]
    model, tools = Recording(fake, [turn(*calls), ANSWER]), Tools(fake)
    run(tmp_path, fake, model, tools)
    assert [args.get("command", args.get("code")) for _, args, _ in tools.calls] == ["a", "b", "c"]
    sent = model.bodies[1]["messages"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == ["c1", "c2", "c3"]
    assert [(m["role"], m["tool_call_id"]) for m in sent[3:]] == [("tool", "c1"), ("tool", "c2"), ("tool", "c3")]


def test_calls_without_ids_are_answered_under_ids_the_loop_made(tmp_path):
    fake = FakeClock()
    nameless = [{k: v for k, v in tool_call("bash", '{"command": "a"}').items() if k != "id"}, tool_call("bash", '{"command": "b"}') | {"id": None}]
    model = Recording(fake, [turn(*nameless), ANSWER])
    _, events = run(tmp_path, fake, model, Tools(fake))
    sent = model.bodies[1]["messages"]
    ids = [c["id"] for c in sent[2]["tool_calls"]]
    assert ids == ["call_gdpval_0_0", "call_gdpval_0_1"] and [m["tool_call_id"] for m in sent[3:]] == ids
    assert [(c["id"], c["given_id"]) for c in of_kind(events, "response")[0]["tool_calls"]] == [(ids[0], None), (ids[1], None)]


def test_reasoning_is_kept_in_the_transcript_and_not_sent_back(tmp_path):
    fake = FakeClock()
    thinking = {"reasoning_content": "I should list files.", "reasoning_details": [{"type": "reasoning.text", "text": "I should list files."}]}
    model = Recording(fake, [completion({"content": "", "tool_calls": [tool_call("bash", '{"command": "ls"}')], **thinking}), ANSWER])
    _, events = run(tmp_path, fake, model, Tools(fake))
    assert of_kind(events, "response")[0]["reasoning"] == thinking
    assert not any(field in m for m in model.bodies[1]["messages"] for field in thinking)


def test_content_as_parts_is_the_final_answer_text(tmp_path):
    fake = FakeClock()
    outcome, _ = run(
        tmp_path, fake, Recording(fake, [completion({"content": [{"type": "text", "text": "All "}, {"type": "text", "text": "done."}]})]), Tools(fake)
    )
    assert (outcome.status.value, outcome.text) == ("succeeded", "All done.")


def test_missing_or_partial_usage_counts_as_unmetered_not_a_crash(tmp_path):
    fake = FakeClock()
    partial, missing = json.loads(turn(tool_call("bash", '{"command": "ls"}')).content), json.loads(ANSWER.content)
    partial["usage"] = {"prompt_tokens": 40, "completion_tokens": None}
    del missing["usage"]
    replies = [type(ANSWER)(200, json=partial), type(ANSWER)(200, json=missing)]
    outcome, events = run(tmp_path, fake, Recording(fake, replies), Tools(fake))
    assert (outcome.status.value, outcome.usage.input_tokens, outcome.usage.output_tokens, outcome.unmetered_turns) == ("succeeded", 40, 0, 2)
    assert of_kind(events, "end")[0]["unmetered_turns"] == 2


def test_token_limit_travels_in_the_field_the_model_wants_with_reasoning_effort(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [ANSWER])
    run(tmp_path, fake, model, Tools(fake), endpoint={"max_tokens": 900, "token_limit_param": "max_completion_tokens", "reasoning_effort": "high"})
    body = model.bodies[0]
    assert (body["max_completion_tokens"], body["reasoning_effort"], "max_tokens" in body) == (900, "high", False)


def sse(*chunks: dict):
    lines = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return type(ANSWER)(200, headers={"content-type": "text/event-stream"}, content=lines.encode())


def delta(piece: dict, finish: str | None = None) -> dict:
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "scripted", "choices": [{"index": 0, "delta": piece, "finish_reason": finish}]}


def test_a_streamed_reply_is_assembled_from_its_deltas(tmp_path):
    fake = FakeClock()
    stream = sse(
        delta({"role": "assistant", "content": ""}),
        delta({"tool_calls": [{"index": 0, "id": "s1", "type": "function", "function": {"name": "bash", "arguments": '{"comm'}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": 'and": "ls"}'}}]}),
        delta({}, "tool_calls"),
        {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "scripted", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    )
    answer = sse(delta({"content": "All "}), delta({"content": "done."}, "stop"))
    model, tools = Recording(fake, [stream, answer]), Tools(fake)
    outcome, _ = run(tmp_path, fake, model, tools, endpoint={"stream": True})
    assert [args["command"] for _, args, _ in tools.calls] == ["ls"]
    assert (outcome.text, outcome.usage.input_tokens, outcome.unmetered_turns) == ("All done.", 7, 1)
    assert model.bodies[0]["stream"] is True and model.bodies[0]["stream_options"] == {"include_usage": True}


def test_the_elide_policy_replaces_old_tool_output_and_is_recorded(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [turn(tool_call("bash", '{"command": "ls"}', f"c{i}")) for i in range(4)] + [ANSWER])

    class Big(Tools):
        def call(self, tool, arguments, timeout):
            super().call(tool, arguments, timeout)
            return type("Out", (), {"output": "x" * 3000, "exit_code": 0, "timed_out": False})()

    _, events = run(tmp_path, fake, model, Big(fake), context="elide", context_budget_tokens=2000)
    assert events[0]["context"] == {"policy": "elide", "budget_tokens": 2000}
    elided = [i for e in of_kind(events, "context") for i in e["elided"]]
    assert elided[:2] == ["c0", "c1"]
    last = model.bodies[-1]["messages"]
    assert [m["content"] == ELIDED for m in last if m["role"] == "tool"][0] is True
    assert last[-1]["role"] == "tool" and last[-1]["content"] != ELIDED


def test_the_default_context_policy_sends_everything(tmp_path):
    fake = FakeClock()
    model = Recording(fake, [turn(tool_call("bash", '{"command": "ls"}')), ANSWER])
    _, events = run(tmp_path, fake, model, Tools(fake))
    assert events[0]["context"] == {"policy": "none", "budget_tokens": None} and not of_kind(events, "context")

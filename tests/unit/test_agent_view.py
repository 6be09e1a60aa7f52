"""The `view` tool: offered only when a run asks for pictures, its pictures sent after the turn's tool
results in one user message, counted as pictures (not base64) by the context policy; the scripted
vision model's check. The renderer in a real sandbox: tests/integration/test_view_tool.py."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from gdpval.agent.context import estimate_tokens
from gdpval.agent.images import IMAGE_TOKENS, Looked, images_message
from gdpval.agent.loop import AgentLoop, AgentSettings, ModelSettings
from gdpval.agent.prompt import ELIDED
from gdpval.agent.transcript import Transcript
from gdpval.fakemodel.dialects import Refused, check_images
from gdpval.fakemodel.script import pictures_seen, scripted_message, validate_script
from support.agent_loop import ANSWER, FakeClock, StandIn, Tools, completion


def png(width: int = 40, height: int = 30) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


class Recording(StandIn):
    def __init__(self, fake, replies):
        super().__init__(fake, replies)
        self.bodies: list[dict] = []

    def handle(self, request):
        self.bodies.append(json.loads(request.content))
        return super().handle(request)


class Pictures:
    """A viewer that answers every path with a line and two pictures."""

    def __init__(self):
        self.paths: list[str] = []

    def view(self, path: str, timeout: float) -> Looked:
        self.paths.append(path)
        return Looked(f"{path}: 2 pictures follow", [png(10, 20), png(30, 40)])


def turn(*calls):
    """One reply making each (id, tool, arguments) call."""
    made = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls]
    return completion({"content": None, "tool_calls": made})


def converse(tmp_path, replies, viewer=None, **agent):
    fake = FakeClock()
    model, tools = Recording(fake, replies), Tools(fake)
    path = tmp_path / "transcript.jsonl"
    with Transcript(path) as transcript:
        loop = AgentLoop(model.client(), ModelSettings(name="scripted"), AgentSettings(**agent), tools, transcript, float("inf"), fake.clock(), viewer=viewer)
        outcome = loop.run("system", "user")
    return outcome, model, tools, [json.loads(line) for line in path.read_text().splitlines()]


def test_pictures_follow_every_tool_result_of_the_turn_in_one_user_message(tmp_path):
    viewer = Pictures()
    _, model, tools, events = converse(tmp_path, [turn(("v1", "view", {"path": "deliverable_files/a.pdf"}), ("b1", "bash", {"command": "ls"})), ANSWER], viewer)
    assert "view" in [t["function"]["name"] for t in model.bodies[0]["tools"]]
    sent = model.bodies[1]["messages"]
    assert [(m["role"], m.get("tool_call_id")) for m in sent[2:]] == [("assistant", None), ("tool", "v1"), ("tool", "b1"), ("user", None)]
    assert sent[3]["content"] == "deliverable_files/a.pdf: 2 pictures follow" and [c[0] for c in tools.calls] == ["bash"]
    urls = [p["image_url"]["url"] for p in sent[5]["content"] if p["type"] == "image_url"]
    assert [base64.b64decode(u.split(",", 1)[1]) for u in urls] == [png(10, 20), png(30, 40)]
    assert pictures_seen(sent) == " Pictures seen: 2 (PNG 10x20, PNG 30x40)."
    (shown,) = [e for e in events if e["event"] == "pictures"]
    assert shown["files"] == ["deliverable_files/a.pdf"] * 2 and len(shown["sha256"][0]) == 64
    assert "base64" not in (tmp_path / "transcript.jsonl").read_text()  # the transcript keeps digests, not pixels


def test_without_a_viewer_view_is_an_unknown_tool(tmp_path):
    _, model, tools, _ = converse(tmp_path, [turn(("v1", "view", {"path": "a.pdf"})), ANSWER])
    assert "view" not in [t["function"]["name"] for t in model.bodies[0]["tools"]]
    assert model.bodies[1]["messages"][-1]["content"].startswith("error: unknown tool 'view'") and not tools.calls


def test_a_picture_counts_as_a_picture_in_the_estimate_and_old_ones_are_elided(tmp_path):
    big = png(1024, 1024) + bytes(200_000)
    message = images_message([("a.png", big)])
    assert IMAGE_TOKENS <= estimate_tokens([message]) < IMAGE_TOKENS + 100

    class Large(Pictures):
        def view(self, path, timeout):
            return Looked("x" * 4000, [png()])

    replies = [turn((f"v{i}", "view", {"path": f"p{i}.png"})) for i in range(4)] + [ANSWER]
    _, model, _, events = converse(tmp_path, replies, Large(), context="elide", context_budget_tokens=2500)
    last = model.bodies[-1]["messages"]
    assert any(m["role"] == "user" and m["content"] == ELIDED for m in last)
    assert last[-1]["role"] == "user" and isinstance(last[-1]["content"], list)  # the latest pictures are kept
    assert "pictures" in [i for e in events if e["event"] == "context" for i in e["elided"]]


def test_the_scripted_model_plays_view_steps_and_the_server_refuses_broken_pictures():
    steps = validate_script([{"view": "deliverable_files/a.pdf"}])
    call = scripted_message([{"role": "user", "content": "task"}], steps)["tool_calls"][0]
    assert call["function"] == {"name": "view", "arguments": json.dumps({"path": "deliverable_files/a.pdf"})}
    with pytest.raises(ValueError, match="view"):
        validate_script([{"look": "a"}])
    whole = images_message([("a.png", png())])
    check_images([whole])
    cut = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": whole["content"][2]["image_url"]["url"][:-8]}}]}
    with pytest.raises(Refused, match="Invalid image"):
        check_images([cut])

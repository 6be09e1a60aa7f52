"""The judge request: what it carries, within its bounds, and how the scripted model's judge mode reads it."""

from __future__ import annotations

import base64
import json

from gdpval.fakemodel import judge as fake_judge
from gdpval.fakemodel.model import FakeModel, FakeModelConfig, request_hash
from gdpval.judge import prompt, wire
from gdpval.judge.convert import View
from gdpval.judge.models import check_reply, parse_rubric

ITEMS = parse_rubric(json.dumps([{"rubric_item_id": "a", "criterion": "Totals", "score": 3}, {"rubric_item_id": "b", "criterion": "Tone", "score": 2}]))


def parts(messages: list[dict]) -> list[dict]:
    [system, user] = messages
    assert system["role"] == "system" and "one line" in system["content"]
    return user["content"]


def test_the_request_carries_task_answer_files_images_and_rubric_in_order():
    views = [View("sheet.xlsx", "spreadsheet", "A1 = 1"), View("scan.pdf", "pdf", "## Page 1", [b"png-1", b"png-2"])]
    sent = parts(prompt.messages("Build the model.", "See the files.", views, ITEMS))
    texts = [p["text"] for p in sent if p["type"] == "text"]
    assert texts[0] == "# Task\nBuild the model." and texts[1] == "# Final answer text\nSee the files."
    assert texts[2] == "# File 'sheet.xlsx' (spreadsheet)\nA1 = 1" and texts[3].startswith("# File 'scan.pdf'")
    images = [p["image_url"]["url"] for p in sent if p["type"] == "image_url"]
    assert images == ["data:image/png;base64," + base64.b64encode(b).decode() for b in (b"png-1", b"png-2")]
    assert wire.rubric_of(prompt.messages("t", "", views, ITEMS)) == [
        {"item_id": "a", "points": 3, "criterion": "Totals"},
        {"item_id": "b", "points": 2, "criterion": "Tone"},
    ]


def test_file_text_and_images_share_one_budget_per_sample():
    big = "x" * prompt.TEXT_PER_SAMPLE
    views = [View(f"{k}.pdf", "pdf", big, [b"p"] * 5) for k in range(3)]
    sent = parts(prompt.messages("t", "", views, ITEMS))
    assert sum(p["type"] == "image_url" for p in sent) == prompt.IMAGES_PER_SAMPLE
    assert sum(len(p["text"]) for p in sent if p["type"] == "text") < prompt.TEXT_PER_SAMPLE + 2 * prompt.PROMPT_MAX + 1000
    assert "no deliverable files" in parts(prompt.messages("t", "", [], ITEMS))[2]["text"]


def judge_body(**extra) -> dict:
    return {"model": "scripted", "messages": prompt.messages("t", "a", [], ITEMS), "response_format": wire.response_format(), **extra}


def ask(app: FakeModel, body: dict):
    return app.handle("POST", "/v1/chat/completions", None, json.dumps(body).encode())


def test_judge_mode_scores_each_item_from_the_request():
    app = FakeModel(FakeModelConfig())
    body = judge_body()
    reply = ask(app, body)
    content = reply.body["choices"][0]["message"]["content"]
    scores = check_reply(content, ITEMS)
    digest = request_hash(body)
    assert [s.score for s in scores] == [fake_judge.item_score(digest, "a", 3), fake_judge.item_score(digest, "b", 2)]
    assert ask(app, body).body["choices"][0]["message"]["content"] == content


def test_judge_mode_faults_and_a_request_without_rubric():
    app = FakeModel(FakeModelConfig(faults={"malformed": 1.0}))
    first, retry = ask(app, judge_body()), ask(app, judge_body())
    assert not first.body["choices"][0]["message"]["content"].endswith("}")
    assert check_reply(retry.body["choices"][0]["message"]["content"], ITEMS)
    assert ask(FakeModel(FakeModelConfig(faults={"500": 1.0})), judge_body()).status == 500
    body = judge_body()
    body["messages"] = [{"role": "user", "content": "score this"}]
    refused = ask(app, body)
    assert refused.status == 400 and wire.RUBRIC_HEADER in refused.body["error"]["message"]

"""The judge over hand-made runs in a real folder, through the real openai client and the scripted model's judge mode."""

from __future__ import annotations

import json
import os

import pytest

from gdpval.agent.client import make_client
from gdpval.fakemodel.server import start_background
from gdpval.judge import LABEL, load_results, load_scores
from gdpval.judge.run import JudgeError, JudgeOptions, judge_run
from gdpval.judge.usage import Prices
from gdpval.records import RunNotPrepared
from gdpval.render import child
from gdpval.sandbox import runtime
from gdpval.settings import OutputSettings
from gdpval.storage import layout, open_storage
from gdpval.storage.local import LocalStorage
from support import runs
from support.cli import gdpval
from support.standins import standin_bytes

RUN = "judged"
FILES = ["model.xlsx", "memo.docx", "deck.pptx", "report.pdf", "chart.png", "photo.jpg", "voice.wav", "clip.mp4", "notes.md"]


def rubric(*points: int) -> str:
    return json.dumps([{"rubric_item_id": f"item-{k}", "criterion": f"criterion {k} – “quoted”", "score": p} for k, p in enumerate(points)], ensure_ascii=False)


@pytest.fixture
def storage(tmp_path, monkeypatch):
    """Four samples: every file type; a failed attempt with a draft; no attempt at all; a task without rubric.

    Slides stay text (no runtime here): rendering them is tests/images/test_judge_slides.py's part."""
    monkeypatch.setenv(runtime.RUNTIMES_ENV, str(tmp_path / "no-runtimes"))
    storage = LocalStorage(tmp_path / "out")
    tasks = [
        runs.task("all-types", rubric_json=rubric(3, 1, 5), sector="Information"),
        runs.task("draft-only", rubric_json=rubric(2, 2), sector="Government"),
        runs.task("never-ran", rubric_json=rubric(4), sector="Government"),
        runs.task("no-rubric", sector="Information"),
    ]
    entries = runs.entries(tasks)
    runs.write_run(storage, RUN, entries)
    files = {name: standin_bytes(name) for name in FILES}
    runs.commit(storage, RUN, entries[0], 1, runs.succeeded(entries[0], 1, files), files)
    runs.commit(storage, RUN, entries[1], 1, runs.failed(entries[1], 1), {"draft.txt": b"half done"})
    runs.commit(storage, RUN, entries[3], 1, runs.succeeded(entries[3], 1, {}), {})
    return storage


@pytest.fixture
def judge_model():
    with start_background(model="judge") as server:
        yield server


def judge(storage, server, **options):
    return judge_run(storage, RUN, make_client(server.base_url), JudgeOptions(model="judge", backoff_seconds=0, **options))


def test_every_file_type_is_judged_and_the_scores_are_cached(storage, judge_model):
    judged = judge(storage, judge_model)
    scores = {s.task_id: s for s in judged.results.samples}
    assert {t: s.status for t, s in scores.items()} == {"all-types": "scored", "draft-only": "scored", "never-ran": "no_deliverable", "no-rubric": "no_rubric"}
    full = scores["all-types"]
    assert [v.split(":")[0] for v in full.views] == sorted(FILES)
    assert all(": other" not in v and "could not be read" not in v for v in full.views)
    here = child.renderer_label(child.backend(os.environ))  # the runtime-less host child here: the score says so
    assert [r.split(" ", 1)[1] for r in full.renderers] == [here] and "text only" in here, full.renderers
    assert full.max_points == 9 and full.points == sum(i.score for i in full.items) and all(0 <= i.score <= i.points for i in full.items)
    assert [i.criterion for i in full.items] == ["criterion 0 – “quoted”", "criterion 1 – “quoted”", "criterion 2 – “quoted”"]
    assert all(i.reason.startswith("scripted judge:") for i in full.items)
    assert (scores["never-ran"].points, scores["never-ran"].max_points) == (0, 4)
    overall = judged.results.overall
    assert overall.max_points == 9 + 4 + 4 and overall.points == full.points + scores["draft-only"].points
    assert judged.results.label == LABEL and judged.cached == 0
    assert load_results(storage, RUN) == judged.results and set(load_scores(storage, RUN)) == {s.sample_id for s in judged.results.samples}
    assert judge_model.stats()["completions"] == 2

    again = judge(storage, judge_model)
    assert again.cached == 4 and judge_model.stats()["completions"] == 2
    assert [s.model_dump() for s in again.results.samples] == [s.model_dump() for s in judged.results.samples]


def test_a_resumed_judge_run_judges_only_missing_and_recommitted_samples(storage, judge_model):
    first = {s.task_id: s for s in judge(storage, judge_model).results.samples}
    storage.delete(layout.judge_sample(RUN, first["all-types"].sample_id))
    entry = runs.entries([runs.task("draft-only")])[0]
    runs.commit(storage, RUN, entry, 2, runs.succeeded(entry, 2, {"final.md": b"# Final"}), {"final.md": b"# Final"})
    resumed = judge(storage, judge_model)
    assert resumed.cached == 2 and judge_model.stats()["completions"] == 2 + 2
    by_task = {s.task_id: s for s in resumed.results.samples}
    assert by_task["draft-only"].attempt == 2 and by_task["draft-only"].views == ["final.md: text, 7 characters"]
    assert by_task["all-types"].items == first["all-types"].items  # the same request gets the same scores


@pytest.mark.parametrize("fault", ["malformed", "500"])
def test_judge_failures_are_retried_then_recorded_not_fatal(storage, fault):
    with start_background(model="judge", faults={fault: 1.0}, fault_repeats=1) as once:
        retried = {s.task_id: s for s in judge(storage, once, tries=3).results.samples}
    assert retried["all-types"].status == "scored" and retried["all-types"].tries == 2
    for key in storage.list(layout.judge_samples(RUN)):
        storage.delete(key)
    with start_background(model="judge", faults={fault: 1.0}, fault_repeats=10) as always:
        judged = judge(storage, always, tries=2)
        assert always.stats()["faults"] == {fault: 4}
    scores = {s.task_id: s for s in judged.results.samples}
    failed = scores["all-types"]
    assert failed.status == "failed" and failed.tries == 2 and (("malformed reply" if fault == "malformed" else "HTTP 500") in failed.error)
    assert judged.results.overall.failed == 2 and judged.results.overall.max_points == 4  # only the sample with nothing to judge counts
    assert load_results(storage, RUN) == judged.results
    with start_background(model="judge") as healthy:
        rejudged = judge(storage, healthy)
    assert rejudged.cached == 2 and rejudged.results.overall.scored == 2  # failures are never reused from the cache


def test_a_run_of_a_revision_without_rubrics_is_refused(tmp_path, judge_model):
    storage = LocalStorage(tmp_path / "out")
    runs.write_run(storage, RUN, runs.entries([runs.task("a"), runs.task("b")]))
    with pytest.raises(JudgeError, match="without rubrics"):
        judge(storage, judge_model)
    with pytest.raises(RunNotPrepared, match="never prepared"):
        judge_run(storage, "other", make_client(judge_model.base_url), JudgeOptions(model="judge"))


@pytest.mark.s3
def test_a_run_in_s3_is_judged_with_the_endpoint_given_on_the_command_line(s3, judge_model, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    bucket = s3.make_bucket()
    where = OutputSettings(url=f"s3://{bucket}/out", endpoint=s3.endpoint_url, region=s3.region)
    storage = open_storage(where, {"access_key_id": s3.access_key, "secret_access_key": s3.secret_key})
    [entry] = runs.entries([runs.task("in-s3", rubric_json=rubric(2, 3))])
    runs.write_run(storage, RUN, [entry])
    files = {"report.pdf": standin_bytes("report.pdf")}
    runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, files), files)
    env = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region}
    judge = ["judge", "--output", where.url, "--run-name", RUN, "--judge-model", "judge", "--judge-base-url", judge_model.base_url]
    done = gdpval(*judge, "--s3-endpoint", s3.endpoint_url, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    results = load_results(storage, RUN)
    assert results is not None and results.overall.scored == 1 and results.overall.max_points == 5
    assert json.loads(done.stdout)["results"] == f"s3://{bucket}/out/{layout.judge_results(RUN)}"
    bad = gdpval(*judge, "--s3-endpoint", "ftp://nowhere", env=env)
    assert bad.returncode == 2 and "--output/--s3-*" in bad.stderr


def test_the_rubric_judge_records_its_own_tokens_and_cost(storage, judge_model):
    """Judge spend is counted per sample and per run, priced when prices are given, apart from the agent's usage."""
    judged = judge(storage, judge_model, prices=Prices(prompt=2.0, completion=8.0))
    scores = {s.task_id: s for s in judged.results.samples}
    spent = scores["all-types"].usage
    assert spent.calls == 1 and spent.prompt_tokens > 0 and spent.completion_tokens > 0
    assert spent.cost == round((spent.prompt_tokens * 2 + spent.completion_tokens * 8) / 1e6, 6)
    assert scores["never-ran"].usage.calls == 0  # nothing to judge, no call
    usage = judged.results.usage
    assert usage.calls == judge_model.stats()["completions"] == 2
    assert usage.prompt_tokens == scores["all-types"].usage.prompt_tokens + scores["draft-only"].usage.prompt_tokens
    assert load_results(storage, RUN).usage == usage

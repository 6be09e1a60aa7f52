"""`gdpval judge` end to end: a local run over the stress dataset (current revision, with rubrics), judged through
the real openai client by the scripted model's judge mode, then judged again (all from the cache)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from gdpval.fakemodel.server import start_background
from gdpval.judge import LABEL, load_results, load_scores
from gdpval.judge.models import parse_rubric
from gdpval.storage.local import LocalStorage
from support import stress
from support.cli import gdpval, run_args

pytestmark = pytest.mark.slow

TASKS = 24
SECRET = "sk-judge-secret-7f3a"


def test_a_stress_run_is_judged_and_a_second_judge_run_resumes_from_the_cache(tmp_path):
    dataset = stress.make_stress_dataset(tmp_path / "dataset", "current")
    output = tmp_path / "out"
    env = {"TMPDIR": str(tmp_path), "OPENAI_API_KEY": SECRET, "JUDGE_KEY": SECRET}
    with start_background(api_key=SECRET) as model:
        done = gdpval(*run_args(dataset, model.base_url, output, "--limit", str(TASKS), run_name="stress"), env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        judge = ["judge", "--output", str(output), "--run-name", "stress", "--judge-model", "scripted", "--judge-base-url", model.base_url]
        first = gdpval(*judge, "--judge-api-key-env", "JUDGE_KEY", "--concurrency", "3", env=env)
        assert first.returncode == 0, first.stderr[-3000:]
        completions = model.stats()["completions"]
        second = gdpval(*judge, "--judge-api-key-env", "JUDGE_KEY", env=env)
        assert second.returncode == 0, second.stderr[-3000:]
        assert model.stats()["completions"] == completions  # nothing judged twice
        unset = gdpval(*judge, "--judge-api-key-env", "NO_SUCH_KEY", env=env)
        assert unset.returncode == 2 and "NO_SUCH_KEY: that environment variable is not set" in unset.stderr
        unkeyed = gdpval(*judge, env={**env, "OPENAI_API_KEY": ""})
        assert unkeyed.returncode == 2 and "rejected the API key" in unkeyed.stderr

    summary = json.loads(first.stdout)
    assert (summary["samples"], summary["scored"], summary["failed"], summary["cached"]) == (TASKS, TASKS, 0, 0)
    assert summary["label"] == LABEL and "not the official GDPval grade" in first.stderr
    assert json.loads(second.stdout)["cached"] == TASKS and json.loads(second.stdout)["points"] == summary["points"]

    storage = LocalStorage(output)
    results = load_results(storage, "stress")
    assert results is not None and results.overall.points == summary["points"]
    rows = {r["task_id"]: r for r in pq.read_table(dataset / stress.PARQUET).to_pylist()[:TASKS]}
    scores = load_scores(storage, "stress")
    assert {s.task_id for s in scores.values()} == set(rows)
    for score in scores.values():
        rubric = parse_rubric(rows[score.task_id]["rubric_json"])
        assert [i.item_id for i in score.items] == [i.item_id for i in rubric]
        assert score.max_points == sum(i.points for i in rubric) and score.sector == rows[score.task_id]["sector"]
        assert score.views == ["reference_inventory.md: text, " + score.views[0].split(", ")[1]]
    assert sum(t.points for t in results.by_sector.values()) == results.overall.points
    assert sum(t.max_points for t in results.by_sector.values()) == results.overall.max_points
    written = "".join(p.read_text(encoding="utf-8") for p in (output / "runs/stress/judge").rglob("*.json"))
    for text in (first.stdout, first.stderr, second.stderr, unkeyed.stderr, written):
        assert SECRET not in text and "secret-7f3a" not in text

"""Pairwise judging over hand-made runs of the stress dataset (13 columns, gold stand-ins in real formats),
through the real openai client and the scripted model's pairwise judges."""

from __future__ import annotations

import os

import pytest

from gdpval.agent.client import make_client
from gdpval.dataset.loader import load_dataset
from gdpval.fakemodel.server import start_background
from gdpval.judge.gold import NoGold
from gdpval.judge.inputs import Inputs
from gdpval.judge.pairwise import GOLD, PairOptions, judge_pairs, load_pairs
from gdpval.judge.request import JudgeOptions
from gdpval.judge.store import load_pair_results
from gdpval.judge.verdicts import PAIRWISE_LABEL
from gdpval.records import load_record
from gdpval.render import child
from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import runs, stress
from support.judged import MARK, PLAIN, make_run, stress_dataset

RUN, OTHER = "ours", "theirs"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return stress_dataset(tmp_path_factory.mktemp("pairwise"))


@pytest.fixture
def storage(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.RUNTIMES_ENV, str(tmp_path / "no-runtimes"))
    return LocalStorage(tmp_path / "out")


def judge(storage, server, tmp_path, run=RUN, **options):
    client = make_client(server.base_url)
    inputs = Inputs(storage, load_record(storage, run), tmp_path / "cache")
    judge_options = JudgeOptions(
        model=options.pop("model", "judge"), backoff_seconds=0, concurrency=3, tries=options.pop("tries", 2), cache_dir=tmp_path / "cache"
    )
    return judge_pairs(storage, run, client, PairOptions(judge_options, **options), inputs)


def test_a_judge_that_prefers_the_first_position_gives_only_inconsistent_ties(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 6)
    with start_background(model="judge", judge_prefers="first") as server:
        results = judge(storage, server, tmp_path).results
        assert server.stats()["completions"] == 12
    overall = results.overall
    assert (overall.wins, overall.losses, overall.ties, overall.inconsistent, overall.failed) == (0, 0, 6, 6, 0)
    assert results.label == PAIRWISE_LABEL and all(len(s.replies) == 2 for s in results.samples)
    assert {r.preferred for s in results.samples for r in s.replies} == {"ours", "theirs"}


@pytest.mark.parametrize(("prefers", "share"), [(f"text:{stress.GOLD_MARK}", 0.0), (f"not-text:{stress.GOLD_MARK}", 1.0)])
def test_a_judge_that_always_prefers_one_side_gives_zero_or_all(storage, dataset, tmp_path, prefers, share):
    make_run(storage, dataset, RUN, 6)
    with start_background(model="judge", judge_prefers=prefers) as server:
        results = judge(storage, server, tmp_path).results
    assert results.overall.wins_or_ties == share and results.overall.inconsistent == 0 and results.overall.failed == 0
    assert results.overall.interval is not None and (results.overall.interval.low, results.overall.interval.high) == (share, share)
    assert set(results.by_sector) == {t.sector for t in dataset.tasks[:6]}
    gold_views = [v for s in results.samples for v in s.views if v.startswith("theirs:")]
    assert len(gold_views) == 6 and all("– final." in v for v in gold_views)  # the expert's file name, not its hash folder
    here = child.renderer_label(child.backend(os.environ))
    assert {r.split(" ", 1)[1] for s in results.samples for r in s.renderers} == {here}  # one conversion for both sides
    index = storage.get_text(layout.gold_index(dataset.ref.key))
    assert all(storage.exists(layout.gold_file(dataset.ref.key, p)) for t in dataset.tasks[:6] for p in dataset.gold[t.task_id]) and "has_gold" in index


def test_the_interval_narrows_as_tasks_are_added(storage, dataset, tmp_path):
    widths = []
    with start_background(model="judge", judge_prefers=f"not-text:{PLAIN}") as server:  # half ties, half losses
        for count in (4, 16, 48):
            run = f"n{count}"
            make_run(storage, dataset, run, count)
            interval = judge(storage, server, tmp_path, run=run).results.overall.interval
            assert interval is not None
            widths.append(interval.high - interval.low)
    assert widths[0] > widths[1] > widths[2]


def test_judging_again_reuses_verdicts_and_cached_calls(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 4, skip=(3,))
    with start_background(model="judge") as server:
        first = judge(storage, server, tmp_path)
        assert server.stats()["completions"] == 6  # the sample without a deliverable costs no call
        again = judge(storage, server, tmp_path)
        assert again.reused == 4 and server.stats()["completions"] == 6
        storage.delete(layout.judge_pair(RUN, GOLD, "judge", first.results.samples[0].sample_id))
        rejudged = judge(storage, server, tmp_path)
        assert server.stats()["completions"] == 6  # both orders from the call cache; they were this pair's calls: still its spend
    assert rejudged.results.usage == first.results.usage and sum(r.cached for s in rejudged.results.samples for r in s.replies) == 2
    none = {s.sample_id: s for s in first.results.samples}[runs.entries(dataset.tasks[3:4])[0].sample.sample_id]
    assert (none.verdict, none.no_deliverable, none.replies) == ("loss", True, [])
    assert [s.verdict for s in rejudged.results.samples] == [s.verdict for s in first.results.samples]
    assert first.results.usage.calls == 6 and first.results.usage.prompt_tokens > 0


def test_failed_pairs_are_left_out_and_only_they_are_judged_again(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 3)
    with start_background(model="judge", faults={"500": 1.0}, fault_repeats=100) as broken:
        failed = judge(storage, broken, tmp_path).results
    assert failed.overall.failed == 3 and failed.overall.wins_or_ties is None and failed.overall.losses == 0
    assert all("HTTP 500" in s.error for s in failed.samples)
    with start_background(model="judge") as healthy:
        fixed = judge(storage, healthy, tmp_path, only_failed=True).results
        assert healthy.stats()["completions"] == 6
    assert fixed.overall.failed == 0 and fixed.overall.samples == 3
    assert len(load_pairs(storage, RUN, GOLD, "judge")) == 3


def test_two_judge_models_keep_their_own_verdicts_and_show_how_often_they_agree(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 6)
    with start_background(model="fair-judge") as fair, start_background(model="first-judge/v2", judge_prefers="first") as biased:
        first = judge(storage, fair, tmp_path, model="fair-judge").results
        second = judge(storage, biased, tmp_path, model="first-judge/v2").results  # a slash in the name: one path segment still
        again = judge(storage, fair, tmp_path, model="fair-judge")
        assert again.reused == 6 and fair.stats()["completions"] == 12  # the second judge replaced nothing of the first's
    assert len(load_pairs(storage, RUN, GOLD, "fair-judge")) == len(load_pairs(storage, RUN, GOLD, "first-judge/v2")) == 6
    assert first.overall.failed == second.overall.failed == 0
    assert first.agreement == [] and [a.judge_model for a in second.agreement] == ["fair-judge"]
    expected = sum(a.verdict == b.verdict for a, b in zip(first.samples, second.samples, strict=True))
    assert (second.agreement[0].pairs, second.agreement[0].agreed) == (6, expected) and expected < 6  # always-first: ties, the fair judge does not
    assert again.results.agreement[0].judge_model == "first-judge/v2" and again.results.agreement[0].agreed == expected
    assert load_pair_results(storage, RUN).judge_model == "fair-judge"  # the latest judging is what the report reads


def test_verdicts_stored_before_they_were_kept_per_model_are_reused(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 2)
    with start_background(model="judge") as server:
        first = judge(storage, server, tmp_path)
        for score in first.results.samples:  # as an older version wrote them
            storage.put_text(f"{layout.legacy_judge_pairs(RUN, GOLD)}/{score.sample_id}.json", score.model_dump_json())
            storage.delete(layout.judge_pair(RUN, GOLD, "judge", score.sample_id))
        again = judge(storage, server, tmp_path)
        assert again.reused == 2 and server.stats()["completions"] == 4


def test_two_runs_head_to_head(storage, dataset, tmp_path):
    make_run(storage, dataset, RUN, 4, marked=lambda i: i < 3)
    make_run(storage, dataset, OTHER, 6, marked=lambda i: False)
    with start_background(model="judge", judge_prefers=f"text:{MARK}") as server:
        results = judge(storage, server, tmp_path, against_run=OTHER).results
    assert results.against == f"run-{OTHER}" and results.overall.samples == 4
    assert [s.verdict for s in results.samples] == ["win", "win", "win", "tie"]
    assert not storage.exists(layout.gold_index(dataset.ref.key))  # the gold is not needed, so not mirrored


def test_a_revision_without_gold_is_refused_in_one_line(storage, tmp_path):
    first = load_dataset(str(stress.make_stress_dataset(tmp_path / "first", "first")), revision=None, cache_dir=tmp_path / "cache")
    make_run(storage, first, RUN, 2)
    with start_background(model="judge") as server, pytest.raises(NoGold, match="13-column revision") as refused:
        judge(storage, server, tmp_path)
    assert "\n" not in str(refused.value) and first.ref.revision in str(refused.value)

"""After pairwise judging: the best-of-N package built from the judge's choice, and the report's grading
section with the pages the judge saw (the scripted judge over HTTP, the real `gdpval` commands)."""

from __future__ import annotations

import base64
import json
import re

import pyarrow.parquet as pq
import pytest

from gdpval.contract import EXIT_JUDGE_UNRELIABLE
from gdpval.fakemodel.server import start_background
from gdpval.judge.store import load_pair_results
from gdpval.judge.verdicts import PAIRWISE_LABEL, UNRELIABLE
from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from gdpval.submission.build import BEST_OF_N_LABEL
from support import stress
from support.cli import gdpval
from support.judged import MARK, make_run, stress_dataset

RUN = "repeated"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return stress_dataset(tmp_path_factory.mktemp("best-of-n"))


@pytest.fixture
def out(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.RUNTIMES_ENV, str(tmp_path / "no-runtimes"))
    return tmp_path / "out"


def judge_args(out, server, tmp_path, *extra: str) -> list[str]:
    return ["judge", "--method", "pairwise", "--output", str(out), "--run-name", RUN, "--judge-model", "judge",
            "--judge-base-url", server.base_url, "--cache-dir", str(tmp_path / "cache"), "--no-preflight", *extra]  # fmt: skip


def test_best_of_n_packages_the_repeat_the_judge_preferred_beside_the_per_repeat_packages(out, dataset, tmp_path):
    storage = LocalStorage(out)
    # samples in order task0/r0, task0/r1, task1/r0, ...: task0 wins on repeat 0, task1 on repeat 1, task2 on none
    entries = make_run(storage, dataset, RUN, 3, marked=lambda i: i in (0, 3), repeats=2)
    built = gdpval("submission", "build", "--output", str(out), "--run-name", RUN, "--no-report", "--no-check")
    assert built.returncode == 0, built.stderr[-2000:]
    per_repeat = sorted(storage.list(layout.submission(RUN)))
    with start_background(model="judge", judge_prefers=f"text:{MARK}") as server:
        done = gdpval(*judge_args(out, server, tmp_path, "--best-of-n"))
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)["pairwise"]
    package = layout.best_of_n_package(RUN)
    assert summary["best_of_n"] == storage.url(package)
    info = json.loads(storage.get_text(layout.package_info(package)))
    tasks = [e.task.task_id for e in entries[::2]]
    assert info["best_of_n"]["label"] == BEST_OF_N_LABEL and info["repeat"] is None and info["repeats"] == 2
    assert info["best_of_n"]["chosen"] == {tasks[0]: 0, tasks[1]: 1, tasks[2]: 0} and info["best_of_n"]["against"] == "gold"
    rows = pq.read_table(out / layout.package_parquet(package)).to_pylist()
    assert [r["task_id"] for r in rows] == tasks
    chosen = {e.task.task_id: e.sample.sample_id for e in entries if info["best_of_n"]["chosen"][e.task.task_id] == e.sample.repeat}
    for row in rows:
        (path,) = row["deliverable_files"]
        committed = out / layout.deliverables(RUN, chosen[row["task_id"]], 1) / "answer.docx"
        assert (out / package / path).read_bytes() == committed.read_bytes()  # the chosen repeat's file, not another's
    assert sorted(storage.list(layout.submission(RUN))) == per_repeat  # the per-repeat packages are untouched

    refused = gdpval("judge", "--best-of-n", *judge_args(out, server, tmp_path)[3:])
    assert refused.returncode == 2 and "--method pairwise" in refused.stderr


def test_the_report_shows_the_estimate_consistency_readiness_and_the_pages_the_judge_saw(out, dataset, tmp_path):
    storage = LocalStorage(out)
    make_run(storage, dataset, RUN, 3, marked=lambda i: i % 2 == 0, repeats=2, extra=("chart.png",))
    checked = gdpval("check", "--output", str(out), "--run-name", RUN)
    assert checked.returncode == 0, checked.stderr[-2000:]
    with start_background(model="judge", judge_prefers=f"text:{MARK}") as server:
        done = gdpval(*judge_args(out, server, tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    results = load_pair_results(storage, RUN)
    assert results is not None and results.consistency.flip_rate == 1.0  # win then tie on every task
    ours = [p for s in results.samples for p in s.pages if p.side == "ours"]
    assert ours and all(p.key.startswith(layout.judge_pages(RUN, "gold")) and storage.exists(p.key) for p in ours)
    assert all(p.key.startswith(layout.judge_only(dataset.ref.key)) for s in results.samples for p in s.pages if p.side == "theirs")

    reported = gdpval("report", "--output", str(out), "--run-name", RUN)
    assert reported.returncode == 0, reported.stderr[-2000:]
    page = (out / layout.report(RUN)).read_text()
    assert PAIRWISE_LABEL.replace("'", "&#x27;") in page and "95% interval" in page
    assert "flip rate from one repeat to the next 100.0%" in page and "1/2 wins: 3 task(s)" in page
    assert "Grading readiness (gdpval check)" in page
    embedded = [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]
    assert embedded and all(png == storage.get_bytes(p.key) for png, p in zip(embedded, ours, strict=False))
    assert stress.GOLD_MARK not in page  # the gold's pages are linked (judge-only), never embedded


@pytest.mark.parametrize(("prefers", "biased"), [("first", True), (f"text:{stress.GOLD_MARK}", False), (f"not-text:{stress.GOLD_MARK}", False)])
def test_a_position_biased_judge_is_labelled_unreliable_everywhere_and_fails_when_consistency_is_required(out, dataset, tmp_path, prefers, biased):
    """Always-first scores 100 % by the tie rule: the CLI, the report and the best-of-N info say it is meaningless, and
    --require-consistency fails the command; judges that always pick the experts' or the model's set are not labelled."""
    storage = LocalStorage(out)
    make_run(storage, dataset, RUN, 3, repeats=2)
    with start_background(model="judge", judge_prefers=prefers) as server:
        done = gdpval(*judge_args(out, server, tmp_path, "--best-of-n", "--require-consistency"))
    assert done.returncode == (EXIT_JUDGE_UNRELIABLE if biased else 0), done.stderr[-2000:]
    summary = json.loads(done.stdout)["pairwise"]
    assert summary["reliability"] == (UNRELIABLE if biased else "")
    assert summary["inconsistent_rate"] == (1.0 if biased else 0.0) and summary["failed_rate"] == 0.0
    (headline,) = [line for line in done.stderr.splitlines() if line.startswith("pairwise ")]
    assert "orders disagreed on" in headline and (UNRELIABLE in headline) == biased, headline
    assert (f"--require-consistency: the pairwise estimate is {UNRELIABLE}" in done.stderr) == biased
    info = json.loads(storage.get_text(layout.package_info(layout.best_of_n_package(RUN))))
    assert info["best_of_n"]["judge_reliability"] == (UNRELIABLE if biased else "")
    reported = gdpval("report", "--output", str(out), "--run-name", RUN)
    assert reported.returncode == 0, reported.stderr[-2000:]
    page = (out / layout.report(RUN)).read_text()
    assert (f"<b>{UNRELIABLE}</b>" in page) == biased and "the two orders disagreed on" in page


def test_a_second_judge_model_prints_and_reports_its_agreement_with_the_first(out, dataset, tmp_path):
    make_run(LocalStorage(out), dataset, RUN, 4, marked=lambda i: i % 2 == 0)
    args = ["judge", "--method", "pairwise", "--output", str(out), "--run-name", RUN, "--cache-dir", str(tmp_path / "cache"), "--no-preflight"]
    with start_background(model="judge-a", judge_prefers=f"text:{MARK}") as a, start_background(model="judge-b", judge_prefers="first") as b:
        first = gdpval(*args, "--judge-model", "judge-a", "--judge-base-url", a.base_url)
        second = gdpval(*args, "--judge-model", "judge-b", "--judge-base-url", b.base_url)
    assert first.returncode == 0 and "agreement with" not in first.stderr, first.stderr[-2000:]
    (agreed,) = json.loads(second.stdout)["pairwise"]["agreement"]
    assert agreed["judge_model"] == "judge-a" and agreed["pairs"] == 4 and agreed["agreed"] < 4, agreed
    line = f"agreement with judge 'judge-a': {agreed['agreed']} of 4 pairs judged by both ({agreed['rate']:.0%}); the GDPval paper reports"
    assert f"{line} grader-expert 66%, expert-expert 71%" in second.stderr, second.stderr[-2000:]
    report = gdpval("report", "--output", str(out), "--run-name", RUN)
    assert report.returncode == 0, report.stderr[-2000:]
    html = (out / layout.report(RUN)).read_text()
    assert "Agreement between judges" in html and "The GDPval paper reports grader-expert 66%, expert-expert 71%." in html

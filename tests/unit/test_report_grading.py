"""The report's grading figures and their HTML, from hand-made judge and check records (pure)."""

from __future__ import annotations

from gdpval.judge.verdicts import PAIRWISE_LABEL, OrderReply, PageRef, PairResults, PairScore
from gdpval.report.grading import EMBEDDED_PAGES, PNG_SIGNATURE, grading, shown_keys
from gdpval.report.grading_html import grading_html
from gdpval.storage import layout
from gdpval.submission.readiness import CheckResults, SampleCheck

RUN = "r"
HOSTILE = "<script>alert(1)</script>"
PNG = PNG_SIGNATURE + b"page"


def score(task: str, repeat: int, verdict: str, pages: list[PageRef] = (), reason: str = "better") -> PairScore:
    replies = [OrderReply(order="ours-first", preferred="ours", reason=reason), OrderReply(order="theirs-first", preferred="ours", reason=reason)]
    return PairScore(sample_id=f"{task}-r{repeat}", task_id=task, sector="S", occupation="O", repeat=repeat, against="gold", judge_model="j",
                     verdict=verdict, replies=replies, pages=list(pages))  # fmt: skip


def results(*scores: PairScore) -> PairResults:
    return PairResults.of(RUN, "gold", "j", "now", list(scores))


def ours(key: str, index: int = 0) -> PageRef:
    return PageRef(side="ours", file="a.pdf", index=index, key=layout.page(layout.judge_pages(RUN, "gold"), key))


def theirs(key: str) -> PageRef:
    return PageRef(side="theirs", file="gold.pdf", index=0, key=layout.page(layout.gold_pages("ds@rev"), key))


def check(*samples: SampleCheck) -> CheckResults:
    return CheckResults(run_name=RUN, renderer="x", samples=list(samples), grading_ready=0.0)


def test_the_estimate_consistency_and_spend_come_from_the_stored_results():
    stored = results(score("t1", 0, "win"), score("t1", 1, "tie"), score("t2", 0, "loss"), score("t2", 1, "loss"))
    figures = grading(stored, {}, None, {}).pairwise
    assert figures is not None and figures.results.label == PAIRWISE_LABEL
    assert figures.results.overall.wins_or_ties == 0.5 and figures.results.overall.interval is not None
    assert figures.results.consistency.flip_rate == 0.5 and figures.results.consistency.wins_k_of_n == {"0/2": 1, "1/2": 1}
    html = grading_html(RUN, grading(stored, {}, None, {}))
    assert "wins or ties 50.0%" in html and "flip rate from one repeat to the next 50.0%" in html
    assert grading(None, {}, None, {}).pairwise is None


def test_only_the_judged_runs_png_pages_are_embedded_and_the_gold_is_only_linked():
    stored = results(score("t1", 0, "win", [ours("a"), ours("b", 1), theirs("g")]))
    assert shown_keys(stored) == [ours("a").key, ours("b").key]
    pngs = {ours("a").key: PNG, ours("b").key: b"<svg onload=alert(1)>", theirs("g").key: PNG}
    figures = grading(stored, pngs, None, {}).pairwise
    assert figures is not None
    pages = figures.seen[0].pages
    assert [(p.side, p.png) for p in pages] == [("model", PNG), ("model", None), ("expert", None)]
    html = grading_html(RUN, grading(stored, pngs, None, {}))
    assert html.count("data:image/png;base64,") == 1 and "onload" not in html
    assert 'href="../../judge-only/ds%40rev/pages/g.png"' in html


def test_embedded_pages_are_capped_over_the_report():
    many = [score(f"t{n}", 0, "win", [ours(f"{n}-{i}", i) for i in range(10)]) for n in range(5)]
    assert len(shown_keys(results(*many))) == EMBEDDED_PAGES


def test_judge_replies_and_names_are_escaped():
    stored = results(score("t1", 0, "win", [ours("a")], reason=HOSTILE))
    html = grading_html(RUN, grading(stored, {}, None, {}))
    assert HOSTILE not in html and "&lt;script&gt;" in html


def test_readiness_lists_each_samples_problems_and_a_current_share():
    ready = SampleCheck(sample_id="s1", task_id="t1", attempt=1, grading_ready=True)
    broken = SampleCheck(sample_id="s2", task_id="t2", attempt=1, problems=["asked for a .xlsx file and none was made"], fonts_substituted=["Calibri"])
    figures = grading(None, {}, check(ready, broken), {"s1": 1, "s2": 1}).readiness
    assert figures is not None and figures.grading_ready == 0.5 and figures.checked == 2
    assert [(p.sample_id, p.problems, p.fonts_substituted) for p in figures.problems] == [("s2", broken.problems, ["Calibri"])]
    stale = grading(None, {}, check(ready, broken), {"s1": 2, "s2": 1})
    assert stale.readiness is not None and stale.readiness.grading_ready is None
    assert "not current" in grading_html(RUN, stale) and grading_html(RUN, grading(None, {}, None, {})) == ""
    assert "text only" not in grading_html(RUN, stale)


def test_a_text_only_check_says_so_in_the_report():
    plain = check(SampleCheck(sample_id="s1", task_id="t1", attempt=1, grading_ready=True)).model_copy(update={"renderer": "host child", "text_only": True})
    html = grading_html(RUN, grading(None, {}, plain, {"s1": 1}))
    assert "Rendered by host child." in html and "<b>Checked text only</b> (no LibreOffice)" in html

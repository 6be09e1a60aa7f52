"""The report's grading section as HTML: every string from a run or a judge reply escaped; page images only
as PNG data the report embeds (the CSP allows images from data: alone), the others as relative links."""

from __future__ import annotations

import base64
import posixpath
from urllib.parse import quote

from gdpval.judge.verdicts import PAPER_AGREEMENT, PairResults, PairTotals
from gdpval.report.grading import Grading, Pairwise, Readiness, SampleSeen, Shown
from gdpval.report.html import e, pct, table
from gdpval.storage import layout


def _pct(value: float | None) -> str:
    return "-" if value is None else pct(value)


def interval(totals: PairTotals) -> str:
    i = totals.interval
    return "-" if i is None else f"{_pct(i.low)} – {_pct(i.high)}"


def totalstable(groups: dict[str, PairTotals], what: str) -> str:
    head = [what, "samples", "wins", "ties (inconsistent)", "losses (no deliverable)", "failed (left out)", "wins or ties", "95% interval"]
    rows = [
        [
            e(name),
            str(t.samples),
            str(t.wins),
            f"{t.ties} ({t.inconsistent})",
            f"{t.losses} ({t.no_deliverable})",
            str(t.failed),
            _pct(t.wins_or_ties),
            interval(t),
        ]
        for name, t in groups.items()
    ]
    return table(head, rows)


def page_html(run: str, page: Shown) -> str:
    """An embedded PNG of the judged run's pages; any other page (the gold's, judge-only) as a relative link."""
    caption = f"{e(page.side)}: {e(page.file)}, page {page.index + 1}"
    if page.png is not None:
        data = base64.b64encode(page.png).decode("ascii")
        return f'<figure class="page"><img alt="{caption}" src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>'
    href = e(quote(posixpath.relpath(page.key, posixpath.dirname(layout.report(run))), safe="/"))
    return f'<figure class="page"><a href="{href}" type="image/png">{caption}</a></figure>'


def seen_html(run: str, seen: SampleSeen) -> str:
    flag = " (inconsistent: the orders disagreed)" if seen.inconsistent else ""
    reasons = "".join(f"<li>{e(r)}</li>" for r in seen.reasons)
    views = "".join(f"<li>{e(v)}</li>" for v in seen.views)
    pages = "".join(page_html(run, p) for p in seen.pages)
    return (
        f'<details class="sample" id="seen-{e(seen.sample_id)}"><summary>{e(seen.sample_id)}: {e(seen.verdict)}{flag}</summary>'
        f"<p>The judge's reasons, per order:</p><ul>{reasons}</ul><p>The views it was shown:</p><ul>{views}</ul>"
        f'<div class="pages">{pages}</div></details>'
    )


def pairwise_html(run: str, shown: Pairwise) -> str:
    p = shown.results
    o, u = p.overall, p.usage
    against = "the experts' deliverables (the public gold)" if p.against == "gold" else e(p.against)
    cost = f", cost {u.cost:,.4f}" if u.cost is not None else ""
    k_of_n = ", ".join(f"{e(k)} wins: {n} task(s)" for k, n in p.consistency.wins_k_of_n.items()) or "-"
    consistency = (
        f"<p>Over {p.consistency.tasks} task(s) with repeats: verdict flip rate from one repeat to the next {_pct(p.consistency.flip_rate)}; {k_of_n}.</p>"
        if p.consistency.tasks
        else "<p>No task has two or more repeats: no consistency figures.</p>"
    )
    seen = "".join(seen_html(run, s) for s in shown.seen)
    unreliable = (
        f'<p class="warn"><b>{e(o.reliability)}</b>: the judge\'s verdict changed with the order of the two sets on more than '
        f"{p.max_inconsistent:.0%} of the pairs; such disagreements count as ties, so wins-or-ties says little about the deliverables.</p>"
        if o.reliability
        else ""
    )
    return (
        f"<h3>Pairwise against {against}</h3>"
        f'<p class="estimate"><b>wins or ties {_pct(o.wins_or_ties)}</b> (95% interval {interval(o)}), {e(p.label)}; '
        f"the two orders disagreed on {_pct(o.inconsistent_rate)} of the judged pairs, {_pct(o.failed_rate)} failed.</p>"
        f"{unreliable}"
        f'<p class="note">judge {e(p.judge_model)}: {o.wins} wins, {o.ties} ties ({o.inconsistent} inconsistent), {o.losses} losses '
        f"({o.no_deliverable} without deliverable), {o.failed} failed (left out); judge calls {u.calls} (+{u.cached_calls} cached), "
        f"tokens {u.prompt_tokens:,}+{u.completion_tokens:,}{cost}, apart from the agent's.</p>"
        f"{agreement_html(p)}"
        f"<h4>By sector</h4>{totalstable(p.by_sector, 'sector')}<h4>By occupation</h4>{totalstable(p.by_occupation, 'occupation')}"
        f"<h4>Consistency across repeats</h4>{consistency}"
        f"<h4>What the judge saw</h4>{seen or '<p>No stored pages (every call came from the cache, or no file had pages).</p>'}"
    )


def agreement_html(p: PairResults) -> str:
    """This judge against every other judge model stored for the run, beside the paper's figures."""
    if not p.agreement:
        return ""
    rows = [[e(p.judge_model), e(a.judge_model), str(a.pairs), _pct(a.rate)] for a in p.agreement]
    paper = ", ".join(f"{who} {rate:.0%}" for who, rate in PAPER_AGREEMENT.items())
    shown = table(["this judge", "other judge", "pairs both judged", "same verdict"], rows)
    return f'<h4>Agreement between judges</h4>{shown}<p class="note">The GDPval paper reports {paper}.</p>'


def readiness_html(r: Readiness) -> str:
    share = _pct(r.grading_ready) if r.grading_ready is not None else "not current (run `gdpval check`)"
    rows = [[e(p.sample_id), "<br>".join(e(x) for x in p.problems) or "-", e(", ".join(p.fonts_substituted)) or "-"] for p in r.problems]
    problems = table(["sample", "problems", "fonts substituted"], rows) if rows else "<p>No sample has a problem.</p>"
    how = f" Rendered by {e(r.renderer)}." if r.renderer else ""
    if r.text_only:
        how += " <b>Checked text only</b> (no LibreOffice): pages, sheets and slides were not counted, fonts not checked."
    return f"<h3>Grading readiness (gdpval check)</h3><p>grading-ready: <b>{share}</b> of {r.checked} checked sample(s).{how}</p>{problems}"


def grading_html(run: str, g: Grading) -> str:
    parts = [pairwise_html(run, g.pairwise) if g.pairwise else "", readiness_html(g.readiness) if g.readiness else ""]
    if not any(parts):
        return ""
    return f'<section id="grading"><h2>Grading</h2>{"".join(parts)}</section>'

"""The report as one self-contained HTML page: inline CSS and SVG, no script, nothing fetched.

Everything from a run (prompts, model text, file names, sector names) is escaped, and a
Content-Security-Policy forbids any script, so a hostile transcript shows as text and runs nothing.
A deliverable is linked as itself only when a browser shows its type without running anything (an
office file, a PDF, an image, plain text); any other (HTML, SVG, XML, script, no extension: a page
of the model's, opened from the report, would run with the report's origin) is linked as a text copy
the report writes beside itself, so it shows as its source or downloads.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any
from urllib.parse import quote

from gdpval.report.grading_html import grading_html
from gdpval.report.html import e, pct, table
from gdpval.report.model import JUDGE_LABEL, Comparison, Group, Report, SampleRow
from gdpval.report.svg import bars, grouped
from gdpval.sample import storable
from gdpval.storage import layout
from gdpval.submission.build import OFFICIAL_SCORE

TEXT_LIMIT = 20_000  # characters of one transcript block; the raw transcript is linked for the rest
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#1d232a}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #dde;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f1f3f7}td.n{text-align:right;font-variant-numeric:tabular-nums}
.figures{display:flex;flex-wrap:wrap;gap:.8em}.figure{border:1px solid #dde;border-radius:6px;padding:.5em .8em;min-width:9em}
.figure b{display:block;font-size:1.4em}.note{color:#5b6470;font-size:.92em}.warn{color:#8a1c1c;background:#fdecea;padding:.4em .6em;border-radius:4px}
.completed{color:#1c7c3a}.failed{color:#b3261e}.missing{color:#7a6400}.win{color:#1c7c3a}.loss{color:#b3261e}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f7f8fa;border:1px solid #e3e6ea;padding:.5em;margin:.3em 0;max-height:30em;overflow:auto}
details.sample{border:1px solid #dde;border-radius:6px;margin:.5em 0;padding:.3em .6em}
.event{margin:.5em 0}.event>.kind{font-weight:600;font-size:.9em;color:#44505c}
figure.page{display:inline-block;margin:.3em}figure.page img{max-width:360px;border:1px solid #dde}
svg.chart text{font:12px system-ui,sans-serif;fill:#1d232a}
"""


def signed(value: float) -> str:
    return f"{value * 100:+.1f} pts"


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def attempt_href(run: str, row: SampleRow, rest: str) -> str:
    """A link from the report to a file of the sample's committed attempt, relative, so it works in any copy of the run."""
    key = f"{layout.attempt_root(run, row.sample_id, row.attempt)}/{rest}"
    return e(quote(posixpath.relpath(key, posixpath.dirname(layout.report(run))), safe="/"))


# Types a browser shows, or hands to a viewer or a download, without running anything of the file's.
PASSIVE = frozenset(
    "docx doc dotx xlsx xls xlsm xlsb pptx ppt potx odt ods odp odg rtf pdf csv tsv txt md json jsonl "
    "png jpg jpeg gif webp bmp tif tiff ico mp3 wav m4a ogg oga flac aac mp4 m4v mov webm avi mkv zip gz tar 7z step stp stl".split()
)


def passive(name: str) -> bool:
    """Whether a deliverable named `name` may be linked as itself (see PASSIVE); its last extension decides."""
    stem, dot, extension = posixpath.basename(name).rpartition(".")
    return bool(dot and stem) and extension.lower() in PASSIVE


def text_copies(report: Report) -> list[tuple[str, str]]:
    """(deliverable key, text copy key) for each deliverable the report links as a text copy."""
    run = report.headline.run_name
    return [
        (f"{layout.attempt_root(run, r.sample_id, r.attempt)}/{layout.DELIVERABLES}/{f}", layout.report_text_copy(run, r.sample_id, r.attempt, f))
        for r in report.samples
        for f in r.files
        if r.attempt and not passive(f)
    ]


def deliverable_link(run: str, row: SampleRow, name: str) -> str:
    """A link to the deliverable, or to its text copy (offered as a download, marked as text) when a browser would run it."""
    if passive(name):
        return f'<a href="{attempt_href(run, row, f"{layout.DELIVERABLES}/{name}")}">{e(name)}</a>'
    copy = layout.report_text_copy(run, row.sample_id, row.attempt, name)
    href = e(quote(posixpath.relpath(copy, posixpath.dirname(layout.report(run))), safe="/"))
    return f'<a href="{href}" download="{e(posixpath.basename(copy))}" type="text/plain">{e(name)}</a> <span class="note">(as text)</span>'


def figure(label: str, value: str, note: str = "") -> str:
    return f'<div class="figure">{e(label)}<b>{value}</b><span class="note">{note}</span></div>'


def headline(report: Report) -> str:
    h, t = report.headline, report.headline.total

    def share(n: int) -> str:
        return pct(n / t.samples) if t.samples else "-"

    figures = [
        figure("samples", str(t.samples)),
        figure("submission-ready", str(t.ready), share(t.ready)),
        figure("completed", str(t.completed), share(t.completed)),
        figure("failed", str(t.failed), share(t.failed)),
        figure("missing", str(t.missing), "no committed attempt"),
        figure("steps", f"{t.steps:,}", f"{t.steps / t.samples:.1f} per sample" if t.samples else ""),
        figure("tokens in / out", f"{t.input_tokens:,} / {t.output_tokens:,}"),
        figure("wall time", duration(h.wall_time_s), f"samples summed {duration(h.sample_time_s)}"),
    ]
    if h.cost is not None:
        figures.append(figure("cost", f"{h.cost:,.4f}", h.cost_source))
    judge = f"{pct(h.judge_score)}" if h.judge_score is not None else "not judged"
    figures.append(figure("judge score", judge, f"{h.judged} judged; {JUDGE_LABEL}"))
    return f'<section id="headline"><h2>Headline</h2><div class="figures">{"".join(figures)}</div></section>'


def failures(report: Report) -> str:
    items = list(report.headline.failures.items())
    if not items:
        return '<section id="failures"><h2>Failures by reason</h2><p>None: every sample completed.</p></section>'
    rows = [[e(reason), str(n)] for reason, n in items]
    chart = bars("Samples that did not complete, by reason", [(r, float(n)) for r, n in items], lambda v: f"{v:.0f}")
    return f'<section id="failures"><h2>Failures by reason</h2>{chart}{table(["reason", "samples"], rows, {1})}</section>'


def group_table(groups: list[Group]) -> str:
    rows = [
        [
            e(g.name),
            str(g.samples),
            f"{g.ready} ({pct(g.ready_rate)})",
            f"{g.completed} ({pct(g.completed_rate)})",
            str(g.failed),
            str(g.missing),
            f"{g.steps / g.samples:.1f}" if g.samples else "-",
            f"{g.input_tokens:,} / {g.output_tokens:,}",
            f"{g.cost:,.4f}" if g.cost is not None else "-",
            pct(g.judge_mean) if g.judge_mean is not None else "not judged",
        ]
        for g in groups
    ]
    head = ["name", "samples", "ready", "completed", "failed", "missing", "mean steps", "tokens in / out", "cost", f"judge ({JUDGE_LABEL})"]
    return table(head, rows, {1, 2, 3, 4, 5, 6, 7, 8, 9})


def groups_section(anchor: str, title: str, groups: list[Group]) -> str:
    chart = grouped(
        f"{title}: submission-ready and completed rates", [(g.name, (g.ready_rate, g.completed_rate)) for g in groups], pct, ("ready", "completed"), 1.0
    )
    return f'<section id="{anchor}"><h2>{title}</h2>{chart}{group_table(groups)}</section>'


def file_types(report: Report) -> str:
    types = report.file_types
    rows = [[e(t.extension), str(t.asked), str(t.produced), str(t.asked_and_produced)] for t in types]
    head = ["type", "asked", "produced", "asked and produced"]
    chart = grouped(
        "Deliverable file types: samples asking for each, samples producing it",
        [(t.extension, (t.asked, t.produced)) for t in types],
        lambda v: f"{v:.0f}",
        ("asked", "produced"),
    )
    note = '<p class="note">"Asked" reads the prompt\'s words (Excel, Word document, PDF, ...): a heuristic.</p>'
    return f'<section id="file-types"><h2>Deliverable file types</h2>{note}{chart}{table(head, rows, {1, 2, 3})}</section>'


def comparison(c: Comparison) -> str:
    head = f"<h3>Against {e(c.other)} ({e(c.other_model)})</h3>"
    summary = (
        f'<p>{c.shared_tasks} shared tasks: <span class="win">{c.wins} won</span>, <span class="loss">{c.losses} lost</span>, {c.ties} tied '
        f'<span class="note">(by judge score where both are judged, else completed &gt; ready &gt; failed; means over repeats)</span></p>'
    )
    chart = grouped(
        "Completed rate by sector, both runs", [(d.name, (d.this_completed, d.other_completed)) for d in c.sectors], pct, ("this run", c.other), 1.0
    )
    sector_rows = [
        [
            e(d.name),
            pct(d.this_ready),
            pct(d.other_ready),
            signed(d.ready),
            signed(d.completed),
            signed(d.judge) if d.judge is not None else "-",
            f"{d.tokens:+,}",
        ]
        for d in c.sectors
    ]
    sectors = table(
        ["sector", "ready (this)", "ready (other)", "ready delta", "completed delta", "judge delta", "tokens delta"], sector_rows, {1, 2, 3, 4, 5, 6}
    )
    task_rows = [[e(t.task_id), e(t.sector), f"{t.this:.2f}", f"{t.other:.2f}", f'<span class="{t.verdict}">{t.verdict}</span>'] for t in c.tasks]
    tasks = f"<details><summary>Per task ({c.shared_tasks})</summary>{table(['task', 'sector', 'this', 'other', 'verdict'], task_rows, {2, 3})}</details>"
    return f'<div class="comparison">{head}{summary}{chart}{sectors}{tasks}</div>'


def sample_table(report: Report) -> str:
    run = report.headline.run_name
    rows = []
    for r in report.samples:
        links = f'<a href="#s-{e(r.sample_id)}">view</a>' if r.attempt else ""
        if r.attempt:
            links += f' <a href="{attempt_href(run, r, layout.TRANSCRIPT)}">jsonl</a>'
        files = "<br>".join(deliverable_link(run, r, f) for f in r.files)
        reason = f"{e(r.error_kind)}: {e(r.error[:300])}" if r.error_kind else ""
        rows.append(
            [
                e(r.sample_id),
                e(r.sector),
                e(r.occupation),
                f'<span class="{r.outcome}">{r.outcome}</span>',
                "yes" if r.ready else "no",
                reason,
                str(r.steps),
                f"{r.input_tokens:,} / {r.output_tokens:,}",
                f"{r.duration_s:.1f}s",
                pct(r.judge) if r.judge is not None else "not judged",
                files,
                links,
            ]
        )
    head = ["sample", "sector", "occupation", "outcome", "ready", "reason", "steps", "tokens in / out", "time", "judge", "deliverables", "transcript"]
    return f'<section id="samples"><h2>Samples</h2>{table(head, rows, {6, 7, 8, 9})}</section>'


def block(kind: str, text: str, note: str = "") -> str:
    text = storable(text)
    if len(text) > TEXT_LIMIT:
        note += f" (cut: {len(text) - TEXT_LIMIT:,} more characters in the jsonl)"
        text = text[:TEXT_LIMIT]
    return f'<div class="event"><span class="kind">{e(kind)}</span> <span class="note">{e(note)}</span><pre>{e(text)}</pre></div>'


def event_html(event: dict[str, Any]) -> str:
    """One transcript event as readable blocks: prompts, replies, tool calls and outputs, the end."""
    kind = str(event.get("event", "?"))
    if kind == "start":
        system = event.get("system")
        return (block("system prompt", system) if system is not None else "") + block("user", str(event.get("user", "")), f"model {event.get('model', '')}")
    if kind == "response":
        out = block("assistant", str(event.get("content") or "")) if event.get("content") else ""
        for call in event.get("tool_calls") or []:
            out += block(f"tool call: {call.get('name', '')}", _arguments(call.get("arguments", "")), str(call.get("id", "")))
        return out
    if kind == "tool_result":
        flags = ["rejected"] * bool(event.get("rejected")) + ["arguments repaired"] * bool(event.get("repaired_arguments"))
        return block(f"tool output: {event.get('name', '')}", str(event.get("content", "")), ", ".join(flags))
    if kind == "submit":
        return block("final answer (submit)", str(event.get("answer", "")))
    if kind == "end":
        return block("end", f"{event.get('status', '')} {event.get('error_kind') or ''} {event.get('error') or ''}".strip(), f"{event.get('steps', 0)} steps")
    if kind == "garbled":
        return block("unreadable line", str(event.get("content", "")), "not JSON: the attempt may have been cut short")
    rest = {k: v for k, v in event.items() if k not in ("event", "t")}
    return block(kind, json.dumps(rest, ensure_ascii=False, indent=1))


def _arguments(raw: object) -> str:
    """A tool call's arguments: the command or code itself when they are the usual one-field JSON."""
    try:
        parsed = json.loads(str(raw))
    except json.JSONDecodeError:
        return str(raw)
    if isinstance(parsed, dict) and len(parsed) == 1:
        return str(next(iter(parsed.values())))
    return json.dumps(parsed, ensure_ascii=False, indent=1)


def judge_items(row: SampleRow) -> str:
    """The judge's score per rubric item with its reason, where the sample was judged."""
    if row.judge is None:
        return ""
    rows = [[e(i.criterion), f"{i.score:g} / {i.points:g}", e(i.reason)] for i in row.judge_items]
    summary = f"judge: {pct(row.judge)} of the rubric's points ({JUDGE_LABEL})"
    return f'<details class="judge"><summary>{summary}</summary>{table(["rubric item", "score", "reason"], rows, {1})}</details>'


def transcripts(report: Report, events: dict[str, list[dict[str, Any]]]) -> str:
    parts = []
    for r in report.samples:
        if r.sample_id not in events:
            continue
        final = f'<p class="note">outcome {r.outcome}; deliverables: {", ".join(e(f) for f in r.files) or "none"}</p>{judge_items(r)}'
        body = "".join(event_html(ev) for ev in events[r.sample_id])
        parts.append(
            f'<details class="sample" id="s-{e(r.sample_id)}"><summary>{e(r.sample_id)} ({e(r.occupation)}): {r.outcome}</summary>{final}{body}</details>'
        )
    return f'<section id="transcripts"><h2>Transcripts</h2>{"".join(parts) or "<p>No committed attempt yet.</p>"}</section>'


def render(report: Report, events: dict[str, list[dict[str, Any]]], comparisons: list[Comparison], generated: str) -> str:
    h = report.headline
    compared = "".join(comparison(c) for c in comparisons)
    sections = [
        headline(report),
        grading_html(report.headline.run_name, report.grading),
        failures(report),
        groups_section("sectors", "By sector", report.sectors),
        groups_section("occupations", "By occupation", report.occupations),
        file_types(report),
        f'<section id="compare"><h2>Comparison</h2>{compared}</section>' if comparisons else "",
        sample_table(report),
        transcripts(report, events),
    ]
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>GDPval report: {e(h.run_name)}</title><style>{STYLE}</style></head><body>'
        f"<h1>GDPval run report: {e(h.run_name)}</h1>"
        f"<p>model <b>{e(h.model)}</b>; dataset {e(h.dataset)} at revision {e(h.revision)}; generated {e(generated)}</p>"
        f'<p class="note">{e(OFFICIAL_SCORE)} Judge figures, where shown, are a {JUDGE_LABEL}.</p>'
        f"{''.join(sections)}</body></html>\n"
    )

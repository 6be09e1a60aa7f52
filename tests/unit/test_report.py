"""The run report: figures from hand-made runs in a real local folder, the comparison of a
constructed pair, the transcript view, and hostile text that must stay text."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from gdpval.judge.models import ItemScore, SampleScore
from gdpval.judge.store import write_score
from gdpval.report import Prices, build_report, compare, load_records, write_report
from gdpval.report.cli import prices
from gdpval.report.records import parse_transcript
from gdpval.report.render import render
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import runs

HOSTILE = '</pre><script>alert(1)</script>"><img src=x onerror=alert(2)><svg onload=alert(3)>'


def make_run(storage, run: str, outcomes: dict[str, str], sector_of=lambda t: "Finance" if t < "t3" else "Health") -> None:
    """Tasks t1..t4: outcome per task is completed, failed (max_steps) or missing."""
    tasks = [runs.task(t, sector=sector_of(t), occupation=f"Occ {t}", prompt=f"Write an Excel workbook and a PDF memo for {t}.") for t in sorted(outcomes)]
    items = runs.entries(tasks)
    runs.write_run(storage, run, items)
    for entry in items:
        outcome = outcomes[entry.task.task_id]
        if outcome == "completed":
            runs.commit(storage, run, entry, 1, runs.succeeded(entry, 1, {"book.xlsx": b"x"}), {"book.xlsx": b"x"})
        elif outcome == "failed":
            runs.commit(storage, run, entry, 1, runs.failed(entry, 1), {"draft.txt": b"d"})


def test_headline_groups_and_file_types(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage, "a", {"t1": "completed", "t2": "failed", "t3": "completed", "t4": "missing"})
    report = build_report(load_records(storage, "a"), Prices(input=2.0, output=10.0))
    h = report.headline
    assert (h.total.samples, h.total.completed, h.total.failed, h.total.missing, h.total.ready) == (4, 2, 1, 1, 3)
    assert h.failures == {"max_steps": 1, "missing": 1}
    assert h.cost == pytest.approx((200 * 2.0 + 40 * 10.0) / 1e6, abs=1e-4)
    assert h.wall_time_s == pytest.approx(2.5) and h.judge_score is None
    assert [(g.name, g.samples, g.completed, g.failed, g.missing) for g in report.sectors] == [("Finance", 2, 1, 1, 0), ("Health", 2, 1, 0, 1)]
    assert len(report.occupations) == 4
    types = {t.extension: (t.asked, t.produced, t.asked_and_produced) for t in report.file_types}
    assert types == {"xlsx": (4, 2, 2), "pdf": (4, 0, 0), "txt": (0, 1, 0)}


def test_written_beside_the_run_with_relative_links(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage, "a", {"t1": "completed", "t2": "missing"})
    uri = write_report(storage, "a")
    assert uri.endswith(layout.report("a"))
    page = (tmp_path / layout.report("a")).read_text(encoding="utf-8")
    assert 'href="samples/t1-r0/attempt-1/deliverable_files/book.xlsx"' in page
    assert 'href="samples/t1-r0/attempt-1/transcript.jsonl"' in page and 'href="#s-t1-r0"' in page
    assert "not judged" in page and "local estimate, not the official grade" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page


ACTIVE = {"page.html": b"<script>1</script>", "chart.SVG": b"<svg onload=alert(1)/>", "feed.xml": b"<x/>", "notes": b"<script>", "sub/app.js": b"1"}
PASSIVE = {"memo.docx": b"d", "plot.png": b"p", "data.csv": b"c", "report.pdf": b"%PDF"}


def test_deliverables_a_browser_would_run_are_linked_as_text_copies(tmp_path):
    storage = LocalStorage(tmp_path)
    [entry] = runs.entries([runs.task("t1")])
    runs.write_run(storage, "a", [entry])
    files = {**ACTIVE, **PASSIVE}
    runs.commit(storage, "a", entry, 1, runs.succeeded(entry, 1, files), files)
    write_report(storage, "a")
    page = (tmp_path / layout.report("a")).read_text(encoding="utf-8")
    for name, data in ACTIVE.items():
        copy = layout.report_text_copy("a", "t1-r0", 1, name)
        assert storage.get_bytes(copy) == data
        href = copy.removeprefix(layout.run_root("a") + "/")
        assert f'href="{href}" download="{href.rsplit("/", 1)[-1]}" type="text/plain"' in page
        assert f'deliverable_files/{name}"' not in page
    for name in PASSIVE:
        assert f'href="samples/t1-r0/attempt-1/deliverable_files/{name}"' in page
        assert not storage.exists(layout.report_text_copy("a", "t1-r0", 1, name))


def test_comparison_deltas_and_verdicts(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage, "a", {"t1": "completed", "t2": "completed", "t3": "failed", "t4": "missing"})
    make_run(storage, "b", {"t1": "completed", "t2": "failed", "t3": "completed", "t4": "missing"})
    c = compare(build_report(load_records(storage, "a")), build_report(load_records(storage, "b")))
    assert (c.shared_tasks, c.wins, c.losses, c.ties) == (4, 1, 1, 2)
    assert {t.task_id: t.verdict for t in c.tasks} == {"t1": "tie", "t2": "win", "t3": "loss", "t4": "tie"}
    finance, health = c.sectors
    assert (finance.name, finance.completed, finance.ready) == ("Finance", 0.5, 0.0)  # t2 completed here, failed (yet ready) there
    assert (health.name, health.completed, health.ready) == ("Health", -0.5, 0.0)


def test_hostile_text_stays_text(tmp_path):
    storage = LocalStorage(tmp_path)
    tasks = [runs.task("t1", sector=HOSTILE, occupation=HOSTILE, prompt=HOSTILE)]
    [entry] = runs.entries(tasks)
    runs.write_run(storage, "a", [entry])
    result = runs.succeeded(entry, 1, {f"{HOSTILE}.txt": b"x"}, text=HOSTILE).model_copy(update={"error": HOSTILE})
    runs.commit(storage, "a", entry, 1, result, {"a.txt": b"x"})
    events = [
        {"event": "start", "system": HOSTILE, "user": HOSTILE},
        {"event": "response", "content": HOSTILE, "tool_calls": [{"id": HOSTILE, "name": HOSTILE, "arguments": HOSTILE}]},
    ]
    storage.put_text(layout.attempt_keys("a", "t1-r0", 1).transcript, "".join(json.dumps(ev) + "\n" for ev in events) + HOSTILE + "\n")
    records = load_records(storage, "a")
    page = render(build_report(records), records.transcripts, [], HOSTILE)
    parsed = Elements()
    parsed.feed(page)
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert not [name for _, name in parsed.attributes if name.startswith("on")]
    assert parsed.text.count(HOSTILE) >= 8  # prompt, model reply, tool call, garbled line, sector, ... shown as written


def test_transcript_lines_that_do_not_parse_are_kept():
    events = parse_transcript('{"event": "start", "user": "hi\\u2028there"}\n{"event": "resp\n[1, 2]\n')
    assert events == [
        {"event": "start", "user": "hi\u2028there"},
        {"event": "garbled", "content": '{"event": "resp'},
        {"event": "garbled", "content": "[1, 2]"},
    ]


def test_prices():
    assert prices(None, None) is None
    with pytest.raises(Exception, match="--price-in and --price-out"):
        prices(1.0, None)


class Elements(HTMLParser):
    """Tags, attribute names and text of a page, as a browser's tokenizer sees them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attributes: list[tuple[str, str]] = []
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes += [(tag, name) for name, _ in attrs]

    def handle_data(self, data):
        self.text += data


def test_judge_scores_are_shown_as_a_local_estimate(tmp_path):
    storage = LocalStorage(tmp_path)
    make_run(storage, "a", {"t1": "completed", "t2": "completed", "t3": "failed"})
    make_run(storage, "b", {"t1": "completed", "t2": "completed", "t3": "failed"})
    for run, points in (("a", (6.0, 2.0, None)), ("b", (3.0, 2.0, None))):
        for task, got in zip(("t1", "t2", "t3"), points, strict=True):
            status = "failed" if got is None else "scored"  # a judge failure counts nowhere
            items = [ItemScore(item_id="1", criterion="Totals <b>match</b>", points=8.0, score=got or 0.0, reason="the sums agree")]
            score = SampleScore(
                sample_id=f"{task}-r0", task_id=task, sector="x", occupation="y", judge_model="j", status=status, points=got or 0.0, max_points=8.0, items=items
            )
            write_score(storage, run, score)
    records = load_records(storage, "a")
    this, other = build_report(records), build_report(load_records(storage, "b"))
    assert (this.headline.judge_score, this.headline.judged) == (0.5, 2)  # (6 + 2) / (8 + 8)
    assert [r.judge for r in this.samples] == [0.75, 0.25, None]
    c = compare(this, other)
    assert {t.task_id: t.verdict for t in c.tasks} == {"t1": "win", "t2": "tie", "t3": "tie"}  # t3: neither judged, both failed
    assert c.sectors[0].judge == 0.1875  # Finance: mean of (0.75, 0.25) against mean of (0.375, 0.25)
    page = render(this, records.transcripts, [c], "now")
    assert "50.0%" in page and "2 judged; local estimate, not the official grade" in page
    assert '<td>Totals &lt;b&gt;match&lt;/b&gt;</td><td class="n">6 / 8</td><td>the sums agree</td>' in page

"""The report in a real headless browser (Debian's Chromium driven by Playwright, no browser download):
two runs of the scripted model over stress tasks from two sectors, the report of one compared with
the other through `gdpval report`, and a page of hostile text. The page loads with no console error,
its plots have one mark per figure, the comparison's deltas are those computed here from each run's
results.parquet, and nothing in a transcript runs. The screenshot is kept in build/test-artifacts/.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from playwright.sync_api import sync_playwright

from gdpval import contract
from gdpval.judge.verdicts import PAIRWISE_LABEL, OrderReply, PageRef, PairResults, PairScore
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from infra.paths import REPO_ROOT
from support import runs, stress
from support.cli import gdpval, run_args
from support.standins import standin_bytes

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO_ROOT / "build" / "test-artifacts"
HOSTILE = '</pre><script>alert(1)</script>"><img src=x onerror=alert(2)><svg onload=alert(3)>'
TASKS_PER_SECTOR = 3


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def open_page(browser, path: Path):
    """The page and what it reported: console messages of any level, page errors and dialogs."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda exc: seen.append(f"pageerror: {exc}"))
    page.on("dialog", lambda d: (seen.append(f"dialog: {d.message}"), d.dismiss()))
    page.goto(path.as_uri(), wait_until="load")
    return page, seen


def two_sector_tasks() -> tuple[list[str], dict[str, str]]:
    rows = stress.stress_rows("current")
    by_sector: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        by_sector[row["sector"]].append(row["task_id"])
    chosen = [task for tasks in list(by_sector.values())[:2] for task in tasks[:TASKS_PER_SECTOR]]
    return chosen, {row["task_id"]: row["sector"] for row in rows}


def rates(output: Path, run: str, sector_of: dict[str, str]) -> dict[str, tuple[float, float]]:
    """(ready, completed) share per sector, from the run's results.parquet."""
    rows = pq.read_table(output / layout.results_parquet(run)).to_pylist()
    by: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by[sector_of[row["task_id"]]].append(row)
    return {s: (sum(r["submission_ready"] for r in rs) / len(rs), sum(r["completed"] for r in rs) / len(rs)) for s, rs in by.items()}


def test_report_and_comparison_render_in_chromium(browser, scripted_model, tmp_path):
    dataset = stress.make_stress_dataset(tmp_path / "dataset", "current")
    tasks, sector_of = two_sector_tasks()
    picked = [arg for task in tasks for arg in ("--task-id", task)]
    output = tmp_path / "out"
    # The short run's samples hit the step limit: it exits as a run with failed samples does.
    for run, extra, status in (("full", (), 0), ("short", ("--max-steps", "3"), contract.EXIT_SAMPLES_FAILED)):
        done = gdpval(*run_args(dataset, scripted_model.base_url, output, *picked, *extra, run_name=run), timeout=600)
        assert done.returncode == status, done.stderr[-3000:]
    made = gdpval("report", "--output", str(output), "--run-name", "full", "--compare", "short", "--price-in", "1.25", "--price-out", "10")
    assert made.returncode == 0, made.stderr[-3000:]
    report = output / layout.report("full")
    assert made.stdout.strip() == str(report)

    page, seen = open_page(browser, report)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert seen == []
    assert page.locator("#sectors tbody tr").count() == 2
    assert page.locator("#sectors svg rect.mark").count() == 4  # ready and completed per sector
    assert page.locator("#occupations svg rect.mark").count() == 2 * page.locator("#occupations tbody tr").count()
    assert page.locator("#compare svg rect.mark").count() == 4  # this run and the other per sector
    widths = [float(w) for w in page.locator("#sectors svg rect.mark").evaluate_all("marks => marks.map(m => m.getBBox().width)")]
    assert min(widths) > 0  # every task of the full run completed

    mine, theirs = rates(output, "full", sector_of), rates(output, "short", sector_of)
    assert mine != theirs, "the short run should fail some tasks"
    cells = page.locator("#compare table").first.locator("tbody tr").evaluate_all("rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    for name, this_ready, other_ready, ready_delta, completed_delta, *_ in cells:
        (a_ready, a_done), (b_ready, b_done) = mine[name], theirs[name]
        assert (this_ready, other_ready) == (f"{a_ready * 100:.1f}%", f"{b_ready * 100:.1f}%")
        assert (ready_delta, completed_delta) == (f"{(a_ready - b_ready) * 100:+.1f} pts", f"{(a_done - b_done) * 100:+.1f} pts")
    verdicts = page.locator("#compare details tbody tr td:last-child").all_text_contents()
    short = {r["task_id"]: r["completed"] for r in pq.read_table(output / layout.results_parquet("short")).to_pylist()}
    assert verdicts.count("win") == sum(not done for done in short.values()) and verdicts.count("loss") == 0
    page.locator(f"#s-{tasks[0]}-r0 summary").click()
    assert page.locator(f"#s-{tasks[0]}-r0 pre").first.is_visible()


def test_hostile_transcript_shows_as_text_in_chromium(browser, tmp_path):
    storage = LocalStorage(tmp_path)
    [entry] = runs.entries([runs.task("t1", sector=HOSTILE, prompt=HOSTILE)])
    runs.write_run(storage, "a", [entry])
    runs.commit(storage, "a", entry, 1, runs.succeeded(entry, 1, {"a.txt": b"x"}, text=HOSTILE), {"a.txt": b"x"})
    storage.put_text(
        layout.attempt_keys("a", "t1-r0", 1).transcript, '{"event": "response", "content": "' + HOSTILE.replace('"', '\\"') + '"}\n' + HOSTILE + "\n"
    )
    made = gdpval("report", "--output", str(tmp_path), "--run-name", "a")
    assert made.returncode == 0, made.stderr[-3000:]
    page, seen = open_page(browser, tmp_path / layout.report("a"))
    page.locator("#s-t1-r0 summary").click()
    assert seen == []
    assert page.locator("script, img, body svg[onload]").count() == 0
    assert page.locator("#s-t1-r0 pre").filter(has_text=HOSTILE).count() == 2  # the reply and the garbled line, verbatim


MODEL_PAGES = {
    "page.html": "<html><head><title>report</title></head><body><script>document.title='ran';console.log('page ran')</script></body></html>",
    "chart.svg": "<svg xmlns='http://www.w3.org/2000/svg' onload=\"console.log('svg onload ran')\"><script>console.log('svg ran')</script></svg>",
}


@pytest.mark.parametrize("name", sorted(MODEL_PAGES))
def test_a_model_written_page_opened_from_the_report_runs_nothing(browser, tmp_path, name):
    """Clicked in the report, a deliverable with a script shows as its source text (or downloads): nothing of it runs."""
    storage = LocalStorage(tmp_path)
    [entry] = runs.entries([runs.task("t1")])
    runs.write_run(storage, "a", [entry])
    files = {name: MODEL_PAGES[name].encode()}
    runs.commit(storage, "a", entry, 1, runs.succeeded(entry, 1, files), files)
    made = gdpval("report", "--output", str(tmp_path), "--run-name", "a")
    assert made.returncode == 0, made.stderr[-3000:]
    page, seen = open_page(browser, tmp_path / layout.report("a"))
    downloads: list[str] = []
    page.on("download", lambda d: downloads.append(d.suggested_filename))
    page.get_by_role("link", name=name).click()
    page.wait_for_load_state("load")
    assert seen == []
    assert downloads == [f"{name}.txt"] or (page.url.endswith(f"/{name}.txt") and page.locator("body").inner_text() == MODEL_PAGES[name])


def test_the_grading_section_shows_the_judged_pages_and_a_hostile_reason_as_text(browser, tmp_path):
    """Pairwise results with a page the judge saw and a reply carrying markup: the page loads as an embedded image
    under the report's policy (no console error), the reason shows verbatim, and the gold's page is only a link."""
    storage = LocalStorage(tmp_path)
    [entry] = runs.entries([runs.task("t1")])
    runs.write_run(storage, "a", [entry])
    runs.commit(storage, "a", entry, 1, runs.succeeded(entry, 1, {"chart.png": b"x"}), {"chart.png": b"x"})
    png = standin_bytes("page.png")
    ours = PageRef(side="ours", file="chart.png", index=0, key=layout.page(layout.judge_pages("a", "gold"), "p1"))
    theirs = PageRef(side="theirs", file="gold.pdf", index=0, key=layout.page(layout.gold_pages("ds"), "g1"))
    storage.put_bytes(ours.key, png)
    reply = OrderReply(order="ours-first", preferred="ours", reason=HOSTILE)
    score = PairScore(sample_id="t1-r0", task_id="t1", sector="S", occupation="O", against="gold", judge_model="j", verdict="win",
                      replies=[reply, reply.model_copy(update={"order": "theirs-first"})], pages=[ours, theirs])  # fmt: skip
    results = PairResults.of("a", "gold", "j", "now", [score])
    storage.put_text(layout.judge_pair_results("a", "gold"), results.model_dump_json())
    made = gdpval("report", "--output", str(tmp_path), "--run-name", "a")
    assert made.returncode == 0, made.stderr[-3000:]
    page, seen = open_page(browser, tmp_path / layout.report("a"))
    page.locator("#seen-t1-r0 summary").click()
    assert seen == []
    images = page.locator("#grading img")
    assert images.count() == 1 and images.first.evaluate("i => i.complete && i.naturalWidth > 0")
    assert page.locator("#grading li").filter(has_text=HOSTILE).count() == 2 and page.locator("#grading script, #grading svg").count() == 0
    assert page.get_by_role("link", name="expert: gold.pdf, page 1").get_attribute("href") == "../../judge-only/ds/pages/g1.png"
    assert PAIRWISE_LABEL in page.locator("#grading .estimate").inner_text()

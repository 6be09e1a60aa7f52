"""`gdpval check` over a hand-made run in a real folder, and grading_ready in the submission it feeds."""

from __future__ import annotations

import json

from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from gdpval.submission.readiness import GRADING_TEXT_ONLY, load_check
from support import hostile, runs
from support.cli import gdpval
from support.standins import standin_bytes

RUN = "checked"


def test_check_finds_unopenable_empty_and_missing_files_and_feeds_the_submission(tmp_path):
    storage = LocalStorage(tmp_path / "out")
    tasks = [
        runs.task("good", prompt="Write the memo as a Word document, with a PDF copy."),
        runs.task("wrong-type", prompt="Create an Excel workbook of the budget."),
        runs.task("broken", prompt="Send the deck as a PowerPoint file."),
        runs.task("never-ran", prompt="Write a memo."),
    ]
    entries = runs.entries(tasks)
    runs.write_run(storage, RUN, entries)
    bomb = hostile.zip_bomb_docx(tmp_path / "bomb.pptx").read_bytes()
    made = {
        "good": {"memo.docx": standin_bytes("memo.docx"), "memo.pdf": standin_bytes("memo.pdf")},
        "wrong-type": {"budget.csv": b"a,b\n1,2\n", "notes.txt": b""},
        "broken": {"deck.pptx": bomb},
    }
    for entry in entries[:3]:
        files = made[entry.task.task_id]
        runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, files), files)
    env = {runtime.RUNTIMES_ENV: str(tmp_path / "no-runtimes")}

    done = gdpval("check", "--output", str(tmp_path / "out"), "--run-name", RUN, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"check": storage.url(layout.check_results(RUN)), "samples": 4, "grading_ready": 0.25, "ready": 1}
    check = load_check(storage, RUN)
    assert check is not None and "host child" in check.renderer and check.text_only  # no runtime here: said, not silent
    by_task = {s.task_id: s for s in check.samples}
    assert by_task["good"].grading_ready and by_task["good"].asked == ["docx", "pdf"]
    assert [(f.name, f.opens, f.pages) for f in by_task["good"].files] == [("memo.docx", True, None), ("memo.pdf", True, 1)]
    assert by_task["wrong-type"].problems == ["notes.txt: empty (0 bytes)", "asked for a .xlsx file and none was made"]
    assert by_task["broken"].problems[0].startswith("deck.pptx: does not open: a zip bomb")
    assert by_task["never-ran"].problems == ["no committed attempt"]
    assert "check broken" in done.stderr and "1 of 4 samples grading-ready" in done.stderr and "check: TEXT ONLY: no LibreOffice" in done.stderr
    status = gdpval("status", "--output", str(tmp_path / "out"), "--run-name", RUN, env=env)
    assert "grading-ready (gdpval check): 25% (checked text only" in status.stdout, status.stderr[-2000:]

    built = gdpval("submission", "build", "--output", str(tmp_path / "out"), "--run-name", RUN, "--no-report", env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    info = json.loads(built.stdout)
    assert info["grading_ready"] == 0.25 and info["packages"][0]["grading_ready"] == 0.25 and info["submission_ready"] == 0.75
    assert info["packages"][0]["grading_text_only"] is True and GRADING_TEXT_ONLY in info["warnings"]
    again = runs.entries([runs.task("never-ran", prompt="Write a memo.")])[0]
    runs.commit(storage, RUN, again, 1, runs.succeeded(again, 1, {"memo.md": b"# Memo"}), {"memo.md": b"# Memo"})
    stale = gdpval("submission", "build", "--output", str(tmp_path / "out"), "--run-name", RUN, "--no-report", "--no-check", env=env)
    assert json.loads(stale.stdout)["grading_ready"] is None  # check.json predates the new commit: no figure rather than a stale one

"""Grading readiness decided from a prompt and the files a sample left, on the real sample prompts."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from gdpval.submission.readiness import FileCheck, asked_types, missing_types, sample_check, share

# What each real task of ../shared/data/gdpval-v1-sample asks to be delivered, read by hand from its prompt.
EXPECTED = {
    "83d10b06": ["xlsx"],  # "Create a new spreadsheet titled 'Sample'" (the attached 'Population' spreadsheet is given)
    "43dc9778": ["pdf"],  # "The 1040 should be provided in PDF form" (15 reference PDFs are given)
    "f84ea6ac": ["docx"],  # "in a Word document"
    "4b894ae3": ["wav"],  # "exported in 48k/24b .WAV" ("Bass Edit Spots.docx" is a reference)
    "0e4fe8cd": ["xlsx"],  # "a multi-tab Excel document"
    "75401f7c": ["mp4"],  # "a video file in an .mp4 format" (logos.mp4 and the mp3/wav sounds are references)
    "4d1a8410": ["docx"],  # "a 1-page word document"
    "5a2d70da": ["xlsx"],  # "Create two Excel files"
    "6974adea": ["docx"],  # "created as a Word document" (seven reference docx)
    "3c19c6d1": ["pptx"],  # "in a PowerPoint file format" (INPUT 1-4 .docx/.xlsx are references)
    "1e5a1d7f": ["docx"],  # "within a .docx file"
    "f2986c1f": ["xlsx"],  # "Create an Excel spreadsheet" ("what are these.jpg" is the given image)
}


@pytest.fixture(scope="module")
def rows(sample_dataset):
    return {r["task_id"][:8]: r for r in pq.read_table(next((sample_dataset / "data").glob("*.parquet"))).to_pylist()}


@pytest.mark.parametrize("task", sorted(EXPECTED))
def test_the_types_each_real_prompt_asks_for(rows, task):
    row = rows[task]
    assert asked_types(row["prompt"], row["reference_files"]) == EXPECTED[task]


def test_quoted_and_attached_files_are_not_asked_for_but_made_ones_are():
    assert asked_types("Use the attached spreadsheet and the reference PDF to write a memo.") == []
    assert asked_types('Start with "logos.mp4" and save the summary as a PDF.') == ["pdf"]
    assert asked_types("The report should be provided in PDF form, with a CSV of the raw data.") == ["pdf", "csv"]


def test_missing_types_accept_the_older_and_open_formats():
    assert missing_types(["xlsx", "pdf"], ["out/Model.XLS", "notes.md"]) == ["pdf"]
    assert missing_types(["docx"], ["memo.odt"]) == [] and missing_types(["pptx"], []) == ["pptx"]


def _file(name: str, size: int = 100, opens: bool = True, **facts) -> FileCheck:
    return FileCheck(name=name, bytes=size, kind="document", opens=opens, unrenderable="" if opens else "a zip bomb", **facts)


def test_a_sample_is_ready_only_with_files_that_open_are_not_empty_and_cover_the_asked_types():
    prompt = "Prepare the itinerary in a Word document."
    ready = sample_check("s1", "t", 1, prompt, [], [_file("plan.docx", fonts_missing=["Aptos"])])
    assert ready.grading_ready and ready.fonts_substituted == ["Aptos"] and ready.asked == ["docx"]
    wrong = sample_check("s2", "t", 1, prompt, [], [_file("plan.pdf"), _file("empty.txt", size=0), _file("bomb.docx", opens=False)])
    assert not wrong.grading_ready
    assert wrong.problems == ["empty.txt: empty (0 bytes)", "bomb.docx: does not open: a zip bomb"]
    assert sample_check("s3", "t", 1, prompt, [], [_file("plan.pdf")]).problems == ["asked for a .docx file and none was made"]
    assert sample_check("s4", "t", 1, "Answer in the chat.", [], []).problems == ["no deliverable file"]
    missing = sample_check("s5", "t", None, prompt, [], [])
    assert missing.problems == ["no committed attempt", "asked for a .docx file and none was made"]
    assert share([ready, wrong, missing]) == round(1 / 3, 4) and share([]) == 0.0

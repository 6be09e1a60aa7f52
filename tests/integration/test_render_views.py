"""Each deliverable type as the judge sees it, from real files made here with the libraries that write them.

Rendered by the limited host child (no full runtime here): tests/images/test_judge_slides.py covers the
full runtime's LibreOffice pages."""

from __future__ import annotations

import io
import wave

import docx
import pypdfium2
import pytest
from openpyxl import Workbook
from PIL import Image
from pptx import Presentation
from pptx.util import Inches

from gdpval.judge import convert
from gdpval.judge.convert import view_file
from gdpval.render import worker
from gdpval.sandbox import runtime
from support.standins import standin_bytes


@pytest.fixture(autouse=True)
def host_renderer(tmp_path, monkeypatch):
    monkeypatch.setenv(runtime.RUNTIMES_ENV, str(tmp_path / "no-runtimes"))


def test_xlsx_each_sheet_with_values_and_formulas(tmp_path):
    book = Workbook()
    sheet = book.active
    sheet.title = "Budget – Q3"
    sheet["A1"], sheet["B1"], sheet["B2"], sheet["B3"] = "Item", 120.5, 79.5, "=SUM(B1:B2)"
    book.create_sheet("Notes")["C7"] = "Reviewed ✓"
    book.save(tmp_path / "b.xlsx")
    view = view_file(tmp_path / "b.xlsx", "budget.xlsx")
    assert view.kind == "spreadsheet"
    assert "## Sheet 'Budget – Q3'" in view.text and "## Sheet 'Notes'" in view.text
    assert "A1 = 'Item'" in view.text and "B1 = 120.5" in view.text and "C7 = 'Reviewed ✓'" in view.text
    assert "formula =SUM(B1:B2)" in view.text  # openpyxl stores no computed value: said so
    assert "not computed" in view.text


def test_xlsx_cells_are_bounded_per_sheet(tmp_path):
    book = Workbook()
    for row in range(worker.CELLS_PER_SHEET + 50):
        book.active.cell(row=row + 1, column=1, value=row)
    book.save(tmp_path / "big.xlsx")
    view = view_file(tmp_path / "big.xlsx", "big.xlsx")
    assert f"A{worker.CELLS_PER_SHEET} =" in view.text and f"A{worker.CELLS_PER_SHEET + 1} =" not in view.text
    assert "only the first" in view.text


def test_docx_headings_paragraphs_and_tables(tmp_path):
    document = docx.Document()
    document.add_heading("Quarterly memo", level=1)
    document.add_heading("Findings", level=2)
    document.add_paragraph("Revenue rose 4\u2028% — see the table.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text, table.cell(1, 0).text, table.cell(1, 1).text = "Region", "Sales", "North", "12"
    document.save(tmp_path / "m.docx")
    text = view_file(tmp_path / "m.docx", "memo.docx").text
    assert text.index("# Quarterly memo") < text.index("## Findings") < text.index("Revenue rose") < text.index("Region | Sales")
    assert "North | 12" in text


def test_pptx_slide_text_tables_and_notes_and_why_slides_are_not_images(tmp_path):
    deck = Presentation()
    first = deck.slides.add_slide(deck.slide_layouts[1])
    first.shapes.title.text = "Launch plan"
    first.placeholders[1].text = "Ship in May"
    first.notes_slide.notes_text_frame.text = "Mention the budget"
    second = deck.slides.add_slide(deck.slide_layouts[6])
    grid = second.shapes.add_table(2, 2, Inches(1), Inches(1), Inches(4), Inches(2)).table
    grid.cell(0, 0).text, grid.cell(1, 1).text = "Owner", "Ana"
    second.shapes.add_group_shape().shapes.add_textbox(Inches(1), Inches(4), Inches(2), Inches(1)).text_frame.text = "In a group"
    deck.save(tmp_path / "d.pptx")
    view = view_file(tmp_path / "d.pptx", "deck.pptx")
    text = view.text
    assert text.index("## Slide 1") < text.index("Launch plan") < text.index("## Slide 2") < text.index("Owner |")
    assert "Ship in May" in text and "(speaker notes) Mention the budget" in text and "| Ana" in text and "In a group" in text
    assert view.facts.slides == 2 and view.facts.pages is None and not view.images
    assert view.facts.office == worker.NO_OFFICE and view.renderer.endswith("host child (no full runtime: text only)")


def test_pdf_text_and_page_images(tmp_path):
    (tmp_path / "r.pdf").write_bytes(standin_bytes("Annual report.pdf"))
    view = view_file(tmp_path / "r.pdf", "report.pdf")
    assert "## Page 1" in view.text and "Annual report.pdf" in view.text
    assert len(view.images) == 1
    with Image.open(io.BytesIO(view.images[0])) as page:
        assert page.format == "PNG" and max(page.size) <= convert.IMAGE_SIDE


def test_pdf_pages_beyond_the_image_limit_give_text_only_and_pages_are_bounded(tmp_path):
    pdf = pypdfium2.PdfDocument.new()
    for _ in range(worker.PDF_PAGES + 3):
        pdf.new_page(200, 100)
    pdf.save(tmp_path / "many.pdf")
    view = view_file(tmp_path / "many.pdf", "many.pdf")
    assert view.text.count("## Page") == worker.PDF_PAGES and len(view.images) == convert.IMAGES_PER_FILE
    assert view.text.endswith("[3 more pages not shown]")


def test_an_image_is_sent_as_an_image_no_larger_than_the_limit(tmp_path):
    Image.new("RGB", (3000, 1500), (200, 30, 30)).save(tmp_path / "chart.jpg")
    view = view_file(tmp_path / "chart.jpg", "chart.JPG")
    assert view.kind == "image" and "3000x1500" in view.text
    with Image.open(io.BytesIO(view.images[0])) as sent:
        assert sent.size == (convert.IMAGE_SIDE, convert.IMAGE_SIDE // 2)


def test_audio_as_metadata(tmp_path):
    with wave.open(str(tmp_path / "a.wav"), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(b"\0\0\0\0" * 12000)
    view = view_file(tmp_path / "a.wav", "voice over.wav")
    assert view.kind == "audio/video" and "1.50 s, 2 channel(s), 8000 Hz, 16-bit" in view.text and not view.images
    (tmp_path / "v.mp4").write_bytes(standin_bytes("clip.mp4"))
    assert "not shown to the judge" in view_file(tmp_path / "v.mp4", "clip.mp4").text


def test_text_is_bounded_and_unknown_or_broken_files_are_described(tmp_path):
    (tmp_path / "n.md").write_text("é" * (convert.TEXT_PER_FILE + 10), encoding="utf-8")
    text = view_file(tmp_path / "n.md", "notes.md").text
    assert text.startswith("é" * 100) and text.endswith("[... 10 more characters not shown]")
    (tmp_path / "x.bin").write_bytes(b"\x00" * 77)
    assert "77 bytes in a format the judge does not read" in view_file(tmp_path / "x.bin", "blob.bin").text
    (tmp_path / "bad.xlsx").write_bytes(b"not a zip")
    bad = view_file(tmp_path / "bad.xlsx", "bad.xlsx")
    assert bad.kind == "spreadsheet" and "not a readable zip" in bad.unrenderable and bad.text.startswith("[the file could not be rendered")

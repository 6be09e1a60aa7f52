"""The judge sees pptx slides as images, rendered by the full runtime's LibreOffice under bubblewrap.

Needs the unpacked full sandbox runtime (`hack/setup.sh --test` builds it); without one the test
fails with what to run, it never skips.
"""

from __future__ import annotations

import io

import pytest
from PIL import Image
from pptx import Presentation

from gdpval.judge import convert
from gdpval.judge.convert import view_file
from gdpval.sandbox import runtime

pytestmark = pytest.mark.slow


def test_slides_are_rendered_as_images_by_the_runtimes_libreoffice(tmp_path):
    if runtime.current() is None:
        pytest.fail(f"no full runtime in {runtime.runtimes_dir()}: run `gdpval runtime build` (hack/setup.sh --test does)")
    deck = Presentation()
    for title in ("Launch plan – Q3", "Budget €1.2 m", "Risks", "Owners", "Next steps", "Appendix"):
        deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = title
    deck.save(tmp_path / "deck.pptx")
    view = view_file(tmp_path / "deck.pptx", "deck.pptx")
    assert "Launch plan – Q3" in view.text and not view.unrenderable and view.facts.slides == view.facts.pages == 6
    assert len(view.images) == convert.IMAGES_PER_FILE  # the first slides, within the per-file bound
    with Image.open(io.BytesIO(view.images[0])) as slide:
        assert slide.format == "PNG" and max(slide.size) <= convert.IMAGE_SIDE and slide.width > slide.height
        darkest, lightest = slide.convert("L").getextrema()
        assert darkest < lightest  # the title drawn, not a blank page


def test_an_unreadable_presentation_is_described_and_not_rendered(tmp_path):
    (tmp_path / "bad.pptx").write_bytes(b"PK\x03\x04 not really a presentation")
    view = view_file(tmp_path / "bad.pptx", "bad.pptx")
    assert "not a readable zip" in view.unrenderable and not view.images


def test_a_document_s_headings_paragraphs_and_tables_are_read_in_order_by_the_runtime(tmp_path):
    """The runtime has the paper's python-docx 0.8, older than the host's: the worker must read it too."""
    if runtime.current() is None:
        pytest.fail(f"no full runtime in {runtime.runtimes_dir()}: run `gdpval runtime build` (hack/setup.sh --test does)")
    import docx

    document = docx.Document()
    document.add_heading("Budget – FY26", 1)
    document.add_paragraph("Totals below.")
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "EMEA", "€1,200"
    document.add_paragraph("Signed off.")
    document.save(tmp_path / "memo.docx")
    view = view_file(tmp_path / "memo.docx", "memo.docx")
    assert not view.unrenderable and view.facts.pages == 1, view.unrenderable
    assert view.text.index("# Budget – FY26") < view.text.index("EMEA | €1,200") < view.text.index("Signed off."), view.text

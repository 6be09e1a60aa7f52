"""A GDPval-like task the scripted model plays with office tools: build a pptx with python-pptx, convert
it to PDF with LibreOffice, render its first page to PNG. It needs the full sandbox image; the host
runtime has neither python-pptx nor LibreOffice, and the tool results say so."""

from __future__ import annotations

DELIVERABLES = "/workspace/deliverable_files"
TITLE = "Quarterly revenue 季度收入"
MADE = "OFFICE-TASK-PPTX-WRITTEN"
FILES = ("deck.pdf", "deck.pptx", "page-1.png")

BUILD_PPTX = f"""
from pptx import Presentation
deck = Presentation()
slide = deck.slides.add_slide(deck.slide_layouts[1])
slide.shapes.title.text = {TITLE!r}
slide.placeholders[1].text = "EMEA 1,200; APAC 800"
deck.save("{DELIVERABLES}/deck.pptx")
print({MADE!r})
"""

TO_PDF_AND_PNG = (
    f"cd {DELIVERABLES} && soffice --headless --norestore --convert-to pdf deck.pptx >/dev/null && pdftoppm -png -r 40 -f 1 -l 1 deck.pdf page && ls"
)

STEPS = [{"python_exec": BUILD_PPTX}, {"bash": TO_PDF_AND_PNG}]

# What the host runtime answers: a clear tool error for each step.
HOST_ERRORS = ("No module named 'pptx'", "soffice: command not found")

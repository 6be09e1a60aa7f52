"""Deliverable files turned into what a judge model can read: text, and a few images, all bounded.

xlsx: each sheet's non-empty cells with value and formula; docx: headings, paragraphs and tables;
pptx: each slide's text, and slide images where LibreOffice can run (judge.slides); pdf: page text
and the first pages as images; images as image inputs; audio and video as metadata; plain text as
itself. Anything else is named with its size only.
A file that cannot be read says so in its text instead of failing the sample.
"""

from __future__ import annotations

import io
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

TEXT_PER_FILE = 30_000
CELLS_PER_SHEET = 2_000
PDF_PAGES = 100  # pages whose text is read
IMAGES_PER_FILE = 4
IMAGE_SIDE = 1024  # longest side of an image sent to the judge, in pixels
IMAGE_FORMATS = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
AUDIO_VIDEO = {".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg", ".mp4", ".mov", ".avi", ".mkv", ".webm"}
PLAIN_TEXT = {".txt", ".md", ".csv", ".tsv", ".json", ".html", ".htm", ".xml", ".py", ".yaml", ".yml", ".tex", ".rtf", ".log"}


@dataclass
class View:
    """One file as the judge sees it: a text block and PNG images."""

    name: str
    kind: str
    text: str
    images: list[bytes] = field(default_factory=list)

    @property
    def summary(self) -> str:
        pictures = f", {len(self.images)} image(s)" if self.images else ""
        return f"{self.name}: {self.kind}, {len(self.text)} characters{pictures}"


def bounded(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"


def view_file(path: Path, name: str) -> View:
    """The view of one deliverable; never raises for an unreadable file."""
    kind, reader = _reader(Path(name).suffix.lower())
    try:
        text, images = reader(path)
    except Exception as exc:  # a broken file is the model's problem, not the judge's: say so and go on
        text, images = f"[the file could not be read as {kind}: {exc.__class__.__name__}: {exc}]", []
    return View(name, kind, bounded(text, TEXT_PER_FILE), images[:IMAGES_PER_FILE])


Read = tuple[str, list[bytes]]


def _xlsx(path: Path) -> Read:
    from openpyxl import load_workbook

    formulas = load_workbook(path, data_only=False, read_only=True)
    values = load_workbook(path, data_only=True, read_only=True)
    try:
        lines: list[str] = []
        for sheet in formulas.worksheets:
            lines.append(f"## Sheet {sheet.title!r}")
            cells = list(islice(_cells(sheet, values[sheet.title]), CELLS_PER_SHEET + 1))
            lines += cells[:CELLS_PER_SHEET]
            if len(cells) > CELLS_PER_SHEET:
                lines.append(f"[only the first {CELLS_PER_SHEET} non-empty cells of this sheet are shown]")
        return "\n".join(lines), []
    finally:
        formulas.close()
        values.close()


def _cells(sheet, cached_sheet) -> Iterator[str]:
    """Each non-empty cell, row by row, beside its cached value (what Excel last computed)."""
    for row, cached_row in zip(sheet.iter_rows(), cached_sheet.iter_rows(), strict=False):
        for cell, cached in zip(row, cached_row, strict=False):
            if cell.value is not None:
                yield _cell_line(getattr(cell, "coordinate", "?"), cell.value, cached.value)


def _cell_line(coordinate: str, raw: object, cached: object) -> str:
    if isinstance(raw, str) and raw.startswith("="):
        shown = "(not computed: the file holds no cached value)" if cached is None else repr(cached)
        return f"{coordinate} = {shown}  formula {raw}"
    return f"{coordinate} = {raw!r}"


def _docx(path: Path) -> Read:
    import docx

    document = docx.Document(str(path))
    lines: list[str] = []
    for block in document.iter_inner_content():
        if isinstance(block, docx.table.Table):
            lines.extend(" | ".join(cell.text.strip() for cell in row.cells) for row in block.rows)
            lines.append("")
            continue
        style = block.style.name if block.style is not None else ""
        if style.startswith("Heading") or style == "Title":
            level = style.removeprefix("Heading").strip()
            lines.append(f"{'#' * (int(level) if level.isdigit() else 1)} {block.text}")
        elif block.text.strip():
            lines.append(block.text)
    return "\n".join(lines), []


def _pptx(path: Path) -> Read:
    from pptx import Presentation

    from gdpval.judge.slides import rendered

    lines = []
    for number, slide in enumerate(Presentation(str(path)).slides, start=1):
        lines.append(f"## Slide {number}")
        lines.extend(_shape_text(slide.shapes))
        notes = slide.notes_slide.notes_text_frame.text.strip() if slide.has_notes_slide and slide.notes_slide.notes_text_frame else ""
        if notes:
            lines.append(f"(speaker notes) {notes}")
    images, why_not = rendered(path, lambda pdf: _pdf(pdf)[1])
    return "\n".join([*lines, why_not] if why_not else lines), images


def _shape_text(shapes) -> Iterator[str]:
    from pptx.shapes.group import GroupShape

    for shape in shapes:
        if shape.has_text_frame and shape.text_frame.text.strip():
            yield shape.text_frame.text
        if getattr(shape, "has_table", False) and shape.has_table:
            yield from (" | ".join(cell.text for cell in row.cells) for row in shape.table.rows)
        if isinstance(shape, GroupShape):
            yield from _shape_text(shape.shapes)


def _pdf(path: Path) -> Read:
    """Page text until the file's text budget or PDF_PAGES is reached; the first pages also as images."""
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(path))
    try:
        lines: list[str] = []
        images: list[bytes] = []
        size = 0
        shown = min(len(pdf), PDF_PAGES)
        for index in range(shown):
            page = pdf[index]
            text = page.get_textpage().get_text_range()
            lines += [f"## Page {index + 1}", text]
            size += len(text)
            if len(images) < IMAGES_PER_FILE:
                width, height = page.get_size()
                images.append(_png(page.render(scale=min(2.0, IMAGE_SIDE / max(width, height, 1))).to_pil()))
            if size > TEXT_PER_FILE:
                shown = index + 1
                break
        if shown < len(pdf):
            lines.append(f"[{len(pdf) - shown} more pages not shown]")
        return "\n".join(lines), images
    finally:
        pdf.close()


def _image(path: Path) -> Read:
    from PIL import Image

    with Image.open(path) as image:
        described = f"image {image.format} {image.width}x{image.height}, {path.stat().st_size} bytes (sent as an image)"
        return described, [_png(image)]


def _png(image) -> bytes:
    """A PNG no larger than IMAGE_SIDE on its longest side."""
    image = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
    image.thumbnail((IMAGE_SIDE, IMAGE_SIDE))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _media(path: Path) -> Read:
    size = path.stat().st_size
    if path.suffix.lower() != ".wav":
        return f"audio/video file of {size} bytes; its content is not shown to the judge", []
    with wave.open(str(path), "rb") as audio:
        seconds = audio.getnframes() / audio.getframerate()
        return (
            f"WAV audio, {seconds:.2f} s, {audio.getnchannels()} channel(s), {audio.getframerate()} Hz, "
            f"{8 * audio.getsampwidth()}-bit, {size} bytes; its sound is not shown to the judge"
        ), []


def _plain(path: Path) -> Read:
    with path.open("rb") as handle:
        data = handle.read(4 * TEXT_PER_FILE + 4)
    return data.decode("utf-8", errors="replace"), []


def _other(path: Path) -> Read:
    return f"a file of {path.stat().st_size} bytes in a format the judge does not read", []


_READERS: dict[str, tuple[str, Callable[[Path], Read]]] = {
    ".xlsx": ("spreadsheet", _xlsx),
    ".xlsm": ("spreadsheet", _xlsx),
    ".docx": ("document", _docx),
    ".pptx": ("presentation", _pptx),
    ".pdf": ("pdf", _pdf),
}


def _reader(suffix: str) -> tuple[str, Callable[[Path], Read]]:
    if suffix in IMAGE_FORMATS:
        return "image", _image
    if suffix in AUDIO_VIDEO:
        return "audio/video", _media
    if suffix in PLAIN_TEXT:
        return "text", _plain
    return _READERS.get(suffix, ("other", _other))

"""Render one file into text, PNG pages and facts: the part that parses untrusted bytes.

It runs as a child, never in the judge's own process: inside a bubblewrap sandbox of the full runtime
(whose /opt/venv python has the document libraries and whose LibreOffice converts Office files to
PDF), or, without that runtime, as a plain child of the host's python with memory and CPU limits.
So it imports nothing of gdpval and only the standard library at the top; its constants are the
render package's. It writes `view.json` and `page-<n>.png` into its output folder.

xlsx: each sheet's non-empty cells with the formula and its value (the value LibreOffice computed
where the file holds none); docx: headings, paragraphs and tables; pptx: each slide's text and notes;
pdf: page text. Office files and PDFs also give their first pages as images. Images are checked
against a pixel budget before they are decoded; audio and video give metadata only.
"""

from __future__ import annotations

import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
import wave
import zipfile
from itertools import islice
from pathlib import Path

TEXT_PER_FILE = 30_000
CELLS_PER_SHEET = 2_000
PDF_PAGES = 100  # pages whose text is read
IMAGES_PER_FILE = 4
IMAGE_SIDE = 1024  # longest side of an image sent to the judge, in pixels
MAX_PIXELS = 64_000_000  # an image with more is refused before it is decoded (a decompression bomb)
OFFICE_TIMEOUT_S = 100
NO_OFFICE = "no LibreOffice here (no full runtime): text only, no page images"
IMAGE_FORMATS = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
AUDIO_VIDEO = {".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg", ".mp4", ".mov", ".avi", ".mkv", ".webm"}
PLAIN_TEXT = {".txt", ".md", ".csv", ".tsv", ".json", ".html", ".htm", ".xml", ".py", ".yaml", ".yml", ".tex", ".log"}
# The fonts runs and styles use: a docx's w:rFonts (not its fontTable, which lists what the template declares)
# and a theme's main fonts, not its per-script fallbacks (<a:font script="Thai" typeface="Angsana New"/>).
FONT_PATTERNS = (
    *(rb"<w:rFonts\b[^>]{0,400}?\bw:" + attribute + rb'="([^"]{1,100})"' for attribute in (b"ascii", b"hAnsi", b"eastAsia", b"cs")),
    rb'<a:(?:latin|ea|cs|sym|buFont)\b[^>]{0,200}?\btypeface="([^"]{1,100})"',
    rb'<(?:x:)?name val="([^"]{1,100})"',
    rb'style:font-name="([^"]{1,100})"',
)
# Families the full image draws with a stand-in that keeps the layout: metric-compatible ones (Liberation,
# Carlito, Caladea), and Symbol, whose glyphs LibreOffice maps to its own OpenSymbol.
METRIC_COMPATIBLE = {
    "symbol": "opensymbol",
    "arial": "liberation sans",
    "helvetica": "liberation sans",
    "arial narrow": "liberation sans narrow",
    "times new roman": "liberation serif",
    "times": "liberation serif",
    "courier new": "liberation mono",
    "courier": "liberation mono",
    "calibri": "carlito",
    "cambria": "caladea",
}
FONT_MEMBERS = re.compile(r"(styles|numbering|theme\d*|document|slide\d+|slideMaster\d+|content)\.xml$")
FONT_BYTES = 4 << 20  # of each member scanned for font names


class Unrenderable(Exception):
    """The file cannot be rendered; the message says why."""


class Rendering:
    """What the worker found: text, PNG images and facts, written out as view.json."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.text = ""
        self.images: list[bytes] = []
        self.facts: dict[str, object] = {}
        self.unrenderable = ""

    def save(self, out: Path) -> None:
        names = []
        for index, png in enumerate(self.images[:IMAGES_PER_FILE]):
            names.append(f"page-{index}.png")
            (out / names[-1]).write_bytes(png)
        body = {"kind": self.kind, "text": self.text[: 4 * TEXT_PER_FILE], "images": names, "facts": self.facts, "unrenderable": self.unrenderable}
        (out / "view.json").write_text(json.dumps(body))


def kind_of(suffix: str) -> str:
    if suffix in IMAGE_FORMATS:
        return "image"
    if suffix in AUDIO_VIDEO:
        return "audio/video"
    if suffix in PLAIN_TEXT:
        return "text"
    if suffix in (".xlsx", ".xlsm", ".xls", ".ods"):
        return "spreadsheet"
    if suffix in (".docx", ".docm", ".doc", ".odt", ".rtf"):
        return "document"
    if suffix in (".pptx", ".pptm", ".ppt", ".odp"):
        return "presentation"
    return "pdf" if suffix == ".pdf" else "other"


def render(path: Path, suffix: str, scratch: Path) -> Rendering:
    kind = kind_of(suffix)
    done = Rendering(kind)
    try:
        _READERS[kind](path, suffix, scratch, done)
    except Unrenderable as exc:
        done.unrenderable = str(exc)
    except MemoryError:
        done.unrenderable = "reading it exceeded the renderer's memory limit"
    except Exception as exc:  # any parser error is the file's fault: say which, never fail the judge
        done.unrenderable = f"it could not be read as {kind}: {exc.__class__.__name__}: {str(exc)[:300]}"
    return done


# --- office files: LibreOffice for pages and computed values, the python libraries for structure ---


def soffice() -> str | None:
    return shutil.which("soffice")


def _convert(path: Path, target: str, scratch: Path) -> Path:
    """`path` converted by LibreOffice (headless, no macros run: its default security refuses unsigned ones)."""
    office = soffice()
    if office is None:
        raise Unrenderable("no LibreOffice here")
    out = scratch / f"converted-{target.split(':')[0]}"
    out.mkdir(exist_ok=True)
    argv = [office, "--headless", "--norestore", "--nolockcheck", "--convert-to", target, "--outdir", str(out), str(path)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=OFFICE_TIMEOUT_S, env={**os.environ, "HOME": str(scratch.resolve())})
    except subprocess.TimeoutExpired:
        raise Unrenderable(f"LibreOffice did not finish within {OFFICE_TIMEOUT_S} s") from None
    made = [p for p in out.iterdir() if p.is_file()]
    if done.returncode != 0 or not made:
        raise Unrenderable(f"LibreOffice could not convert it (exit {done.returncode}: {' '.join(done.stderr.split())[-200:]})")
    return made[0]


def _pages(path: Path, scratch: Path, done: Rendering) -> str:
    """The file's pages as images through a LibreOffice PDF, and that PDF's text; '' without LibreOffice."""
    if soffice() is None:
        done.facts["office"] = NO_OFFICE
        return ""
    pdf = _convert(path, "pdf", scratch)
    text, images, count = _pdf_pages(pdf)
    done.images, done.facts["pages"] = images, count
    done.facts["fonts_used"] = _pdf_fonts(pdf)
    return text


def _office(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    _refuse_macros(path, suffix)
    done.facts["fonts_named"] = _named_fonts(path)
    page_text = _pages(path, scratch, done)
    if done.kind == "spreadsheet":
        done.text = _sheets(path, suffix, scratch, done) if suffix in (".xlsx", ".xlsm") else page_text
    elif suffix == ".docx":
        done.text = _docx(path)
    elif suffix == ".pptx":
        done.text = _pptx(path, done)
    else:
        done.text = page_text
    if done.kind == "presentation" and "pages" in done.facts:
        done.facts["slides"] = done.facts["pages"]


def _refuse_macros(path: Path, suffix: str) -> None:
    if suffix in (".doc", ".xls", ".ppt", ".rtf"):
        return
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    if any(n.lower().endswith("vbaproject.bin") or n.startswith(("Basic/", "Scripts/")) for n in names):
        raise Unrenderable("it holds macros (a VBA or Basic project), which the renderer never opens")


def _named_fonts(path: Path) -> list[str]:
    """The font families the file's XML names, character references decoded (theme placeholders such as +mn-lt left out)."""
    found: set[str] = set()
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if FONT_MEMBERS.search(info.filename):
                    with archive.open(info) as member:
                        data = member.read(FONT_BYTES)
                    found.update(html.unescape(m.decode("utf-8", "replace")) for pattern in FONT_PATTERNS for m in re.findall(pattern, data))
    except zipfile.BadZipFile:
        return []
    return sorted(name for name in found if name.strip() and not name.startswith("+"))


def _sheets(path: Path, suffix: str, scratch: Path, done: Rendering) -> str:
    from openpyxl import load_workbook

    formulas = load_workbook(path, data_only=False, read_only=True)
    values = load_workbook(path, data_only=True, read_only=True)
    computed = None
    try:
        done.facts["sheets"] = len(formulas.sheetnames)
        if soffice() is not None and _uncomputed(formulas, values):
            computed = load_workbook(_convert(path, "xlsx:Calc MS Excel 2007 XML", scratch), data_only=True, read_only=True)
            done.facts["computed_by"] = "LibreOffice (the file holds no cached values)"
        lines: list[str] = []
        for sheet in formulas.worksheets:
            lines.append(f"## Sheet {sheet.title!r}")
            source = computed if computed is not None and sheet.title in computed.sheetnames else values
            cells = list(islice(_cells(sheet, source[sheet.title]), CELLS_PER_SHEET + 1))
            lines += cells[:CELLS_PER_SHEET]
            if len(cells) > CELLS_PER_SHEET:
                lines.append(f"[only the first {CELLS_PER_SHEET} non-empty cells of this sheet are shown]")
        return "\n".join(lines)
    finally:
        for book in (formulas, values, computed):
            if book is not None:
                book.close()


def _uncomputed(formulas, values) -> bool:
    """Whether some formula cell (of the first CELLS_PER_SHEET per sheet) has no cached value."""
    for sheet in formulas.worksheets:
        for row, cached in zip(sheet.iter_rows(), values[sheet.title].iter_rows(), strict=False):
            for cell, value in zip(row, cached, strict=False):
                if isinstance(cell.value, str) and cell.value.startswith("=") and value.value is None:
                    return True
    return False


def _cells(sheet, cached_sheet):
    """Each non-empty cell, row by row, beside its value (cached by Excel, or computed by LibreOffice)."""
    for row, cached_row in zip(sheet.iter_rows(), cached_sheet.iter_rows(), strict=False):
        for cell, cached in zip(row, cached_row, strict=False):
            if cell.value is not None:
                yield _cell_line(getattr(cell, "coordinate", "?"), cell.value, cached.value)


def _cell_line(coordinate: str, raw: object, cached: object) -> str:
    if isinstance(raw, str) and raw.startswith("="):
        shown = "(not computed: the file holds no cached value)" if cached is None else repr(cached)
        return f"{coordinate} = {shown}  formula {raw}"
    return f"{coordinate} = {raw!r}"


def _docx(path: Path) -> str:
    import docx

    document = docx.Document(str(path))
    lines: list[str] = []
    for block in _blocks(document):
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
    return "\n".join(lines)


def _blocks(document):
    """The body's paragraphs and tables in order. Read from the XML, since the full runtime has the
    paper's python-docx 0.8, which lacks `iter_inner_content` (1.0 and later)."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            yield Paragraph(child, document)
        elif tag == "tbl":
            yield Table(child, document)


def _pptx(path: Path, done: Rendering) -> str:
    from pptx import Presentation

    lines = []
    slides = Presentation(str(path)).slides
    done.facts["slides"] = len(slides)
    for number, slide in enumerate(slides, start=1):
        lines.append(f"## Slide {number}")
        lines.extend(_shape_text(slide.shapes))
        notes = slide.notes_slide.notes_text_frame.text.strip() if slide.has_notes_slide and slide.notes_slide.notes_text_frame else ""
        if notes:
            lines.append(f"(speaker notes) {notes}")
    return "\n".join(lines)


def _shape_text(shapes):
    from pptx.shapes.group import GroupShape

    for shape in shapes:
        if shape.has_text_frame and shape.text_frame.text.strip():
            yield shape.text_frame.text
        if getattr(shape, "has_table", False) and shape.has_table:
            yield from (" | ".join(cell.text for cell in row.cells) for row in shape.table.rows)
        if isinstance(shape, GroupShape):
            yield from _shape_text(shape.shapes)


# --- pdf: pymupdf in the full runtime, pypdfium2 on the host ---


def _pdf(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    done.text, done.images, done.facts["pages"] = _pdf_pages(path)


def _pdf_pages(path: Path) -> tuple[str, list[bytes], int]:
    """Page text until the text budget or PDF_PAGES; the first pages as PNGs; the page count."""
    pages = _open_pdf(path)
    lines: list[str] = []
    images: list[bytes] = []
    size = 0
    shown = min(len(pages), PDF_PAGES)
    for index in range(shown):
        text, picture = pages.page(index, len(images) < IMAGES_PER_FILE)
        lines += [f"## Page {index + 1}", text]
        size += len(text)
        if picture is not None:
            images.append(picture)
        if size > TEXT_PER_FILE:
            shown = index + 1
            break
    if shown < len(pages):
        lines.append(f"[{len(pages) - shown} more pages not shown]")
    return "\n".join(lines), images, len(pages)


class _Fitz:
    def __init__(self, path: Path) -> None:
        import fitz

        self.doc = fitz.open(str(path))

    def __len__(self) -> int:
        return len(self.doc)

    def page(self, index: int, picture: bool) -> tuple[str, bytes | None]:
        import fitz

        page = self.doc[index]
        if not picture:
            return page.get_text(), None
        scale = min(2.0, IMAGE_SIDE / max(page.rect.width, page.rect.height, 1))
        return page.get_text(), page.get_pixmap(matrix=fitz.Matrix(scale, scale)).tobytes("png")


class _Pdfium:
    def __init__(self, path: Path) -> None:
        import pypdfium2

        self.doc = pypdfium2.PdfDocument(str(path))

    def __len__(self) -> int:
        return len(self.doc)

    def page(self, index: int, picture: bool) -> tuple[str, bytes | None]:
        page = self.doc[index]
        text = page.get_textpage().get_text_range()
        if not picture:
            return text, None
        width, height = page.get_size()
        return text, _png(page.render(scale=min(2.0, IMAGE_SIDE / max(width, height, 1))).to_pil())


def _open_pdf(path: Path):
    try:
        return _Fitz(path)
    except ImportError:
        return _Pdfium(path)


def _pdf_fonts(pdf: Path) -> list[str]:
    """The font families a PDF embeds (LibreOffice embeds what it really drew with), subset tags cut."""
    try:
        import fitz
    except ImportError:
        return []
    names: set[str] = set()
    with fitz.open(str(pdf)) as doc:
        for page in islice(doc, PDF_PAGES):
            names.update(font[3].split("+", 1)[-1] for font in page.get_fonts())
    return sorted(names)


# --- images, media, text ---


def _image(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(path) as image:
                if image.width * image.height > MAX_PIXELS:
                    raise Unrenderable(f"an image of {image.width}x{image.height} pixels, over the {MAX_PIXELS:,} the renderer decodes")
                done.text = f"image {image.format} {image.width}x{image.height}, {path.stat().st_size} bytes (sent as an image)"
                done.facts["pixels"] = [image.width, image.height]
                done.images = [_png(image)]
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise Unrenderable(f"a decompression bomb: {exc}") from None


def _png(image) -> bytes:
    """A PNG no larger than IMAGE_SIDE on its longest side."""
    image.draft("RGB", (IMAGE_SIDE, IMAGE_SIDE))
    image = image.convert("RGBA" if image.mode in ("RGBA", "LA", "P") else "RGB")
    image.thumbnail((IMAGE_SIDE, IMAGE_SIDE))
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _media(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    size = path.stat().st_size
    if suffix != ".wav":
        done.text = f"audio/video file of {size} bytes; its content is not shown to the judge"
        return
    with wave.open(str(path), "rb") as audio:
        seconds = audio.getnframes() / audio.getframerate()
        done.facts["seconds"] = round(seconds, 3)
        done.text = (
            f"WAV audio, {seconds:.2f} s, {audio.getnchannels()} channel(s), {audio.getframerate()} Hz, "
            f"{8 * audio.getsampwidth()}-bit, {size} bytes; its sound is not shown to the judge"
        )


def _plain(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    with path.open("rb") as handle:
        done.text = handle.read(4 * TEXT_PER_FILE + 4).decode("utf-8", errors="replace")


def _other(path: Path, suffix: str, scratch: Path, done: Rendering) -> None:
    done.text = f"a file of {path.stat().st_size} bytes in a format the judge does not read"


_READERS = {
    "image": _image,
    "audio/video": _media,
    "text": _plain,
    "spreadsheet": _office,
    "document": _office,
    "presentation": _office,
    "pdf": _pdf,
    "other": _other,
}


def available_fonts() -> list[str]:
    """Every family fontconfig knows here (each name of a family), for the fonts check."""
    if shutil.which("fc-list") is None:
        return []
    done = subprocess.run(["fc-list", "--format", "%{family}\n"], capture_output=True, text=True, timeout=60)
    return sorted({name.strip() for line in done.stdout.splitlines() for name in line.split(",") if name.strip()})


def missing_fonts(named: list[str], available: list[str]) -> list[str]:
    """The named families fontconfig lacks here, nor a metric-compatible one, so LibreOffice drew them with a substitute."""
    have = {name.casefold() for name in available}
    return [name for name in named if name.casefold() not in have and METRIC_COMPATIBLE.get(name.casefold()) not in have]


def main(argv: list[str]) -> int:
    """worker.py IN SUFFIX OUT: render IN (read as SUFFIX) into the folder OUT."""
    source, suffix, out = Path(argv[0]), argv[1].lower(), Path(argv[2])
    scratch = out / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    done = render(source, suffix, scratch)
    if done.facts.get("fonts_named") and soffice() is not None:
        done.facts["fonts_missing"] = missing_fonts(done.facts["fonts_named"], available_fonts())  # type: ignore[arg-type]
    shutil.rmtree(scratch, ignore_errors=True)
    done.save(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Stand-in reference files in real formats, named exactly as the dataset rows name them.

The sample dataset ships without its binary reference files; tests need files that real tools
accept (zip readers, XML parsers, `wave`, PDF and image sniffers). Content is derived from the
file's name, so every file is deterministic and most differ in size. Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import struct
import wave
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import escape

import pyarrow.parquet as pq

from infra.paths import REPO_ROOT

_FIXED_TIME = (2024, 1, 1, 0, 0, 0)


def sample_dataset_path() -> Path:
    """The 12-task GDPval sample shared beside the checkout, ``../shared/data/gdpval-v1-sample``
    (Hugging Face layout, parquet only: `make_standin_dataset` adds the reference files)."""
    path = REPO_ROOT.parent / "shared" / "data" / "gdpval-v1-sample"
    if not any((path / "data").glob("*.parquet")):
        raise FileNotFoundError(f"the GDPval sample dataset is missing: expected {path}/data/*.parquet")
    return path


def make_standin_dataset(src: Path, dest: Path) -> Path:
    """Copy `src/data/*.parquet` to `dest` and create every reference file its rows name."""
    (dest / "data").mkdir(parents=True, exist_ok=True)
    for parquet in sorted((src / "data").glob("*.parquet")):
        shutil.copyfile(parquet, dest / "data" / parquet.name)
        for path in _reference_paths(parquet):
            target = dest / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(standin_bytes(target.name))
    return dest


def _reference_paths(parquet: Path) -> list[str]:
    column = pq.read_table(parquet, columns=["reference_files"]).column("reference_files").to_pylist()
    return sorted({path for paths in column for path in (paths or [])})


def standin_bytes(name: str) -> bytes:
    """A small, valid file for `name`'s extension (case-insensitive), varying with the name."""
    extension = Path(name).suffix.lower().lstrip(".")
    return _MAKERS.get(extension, _text)(name, _seed(name))


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def _text(name: str, seed: int) -> bytes:
    lines = [f"Stand-in for {name}", *(f"line {i}: {seed * (i + 1) % 9973}" for i in range(seed % 13))]
    return ("\n".join(lines) + "\n").encode()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in members.items():
            archive.writestr(zipfile.ZipInfo(member, _FIXED_TIME), data)
    return buffer.getvalue()


def _content_types(overrides: dict[str, str]) -> bytes:
    parts = "".join(f'<Override PartName="/{part}" ContentType="{kind}"/>' for part, kind in overrides.items())
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        f'<Default Extension="xml" ContentType="application/xml"/>{parts}</Types>'
    ).encode()


def _rels(targets: list[tuple[str, str]]) -> bytes:
    rels = "".join(
        f'<Relationship Id="rId{i}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/{kind}" Target="{target}"/>'
        for i, (kind, target) in enumerate(targets, 1)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rels}</Relationships>'
    ).encode()


_NS_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_NS_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_NS_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_NS_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_OOXML = "application/vnd.openxmlformats-officedocument"


def _xlsx(name: str, seed: int) -> bytes:
    rows = "".join(
        f'<row r="{r}"><c r="A{r}" t="inlineStr"><is><t>{escape(name)} {r}</t></is></c><c r="B{r}"><v>{seed % 1000 + r}</v></c></row>'
        for r in range(1, 2 + seed % 9)
    )
    return _zip(
        {
            "[Content_Types].xml": _content_types(
                {
                    "xl/workbook.xml": f"{_OOXML}.spreadsheetml.sheet.main+xml",
                    "xl/worksheets/sheet1.xml": f"{_OOXML}.spreadsheetml.worksheet+xml",
                }
            ),
            "_rels/.rels": _rels([("officeDocument", "xl/workbook.xml")]),
            "xl/workbook.xml": (
                f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><workbook xmlns="{_NS_MAIN}" '
                f'xmlns:r="{_NS_R}"><sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
            ).encode(),
            "xl/_rels/workbook.xml.rels": _rels([("worksheet", "worksheets/sheet1.xml")]),
            "xl/worksheets/sheet1.xml": (
                f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="{_NS_MAIN}"><sheetData>{rows}</sheetData></worksheet>'
            ).encode(),
        }
    )


def _docx(name: str, seed: int) -> bytes:
    paragraphs = "".join(f"<w:p><w:r><w:t>{escape(name)}, paragraph {i}</w:t></w:r></w:p>" for i in range(1, 2 + seed % 11))
    return _zip(
        {
            "[Content_Types].xml": _content_types({"word/document.xml": f"{_OOXML}.wordprocessingml.document.main+xml"}),
            "_rels/.rels": _rels([("officeDocument", "word/document.xml")]),
            "word/document.xml": (
                f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{_NS_W}"><w:body>{paragraphs}</w:body></w:document>'
            ).encode(),
        }
    )


def _pptx(name: str, seed: int) -> bytes:
    shape = (
        '<p:sp><p:nvSpPr><p:cNvPr id="2" name="Title"/><p:cNvSpPr/><p:nvPr/></p:nvSpPr><p:spPr/>'
        f"<p:txBody><a:bodyPr/><a:p><a:r><a:t>{escape(name)} {seed % 97}</a:t></a:r></a:p></p:txBody></p:sp>"
    )
    tree = f'<p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{shape}</p:spTree></p:cSld>'
    head = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    ns = f'xmlns:a="{_NS_A}" xmlns:r="{_NS_R}" xmlns:p="{_NS_P}"'
    return _zip(
        {
            "[Content_Types].xml": _content_types(
                {
                    "ppt/presentation.xml": f"{_OOXML}.presentationml.presentation.main+xml",
                    "ppt/slides/slide1.xml": f"{_OOXML}.presentationml.slide+xml",
                    "ppt/slideLayouts/slideLayout1.xml": f"{_OOXML}.presentationml.slideLayout+xml",
                    "ppt/slideMasters/slideMaster1.xml": f"{_OOXML}.presentationml.slideMaster+xml",
                }
            ),
            "_rels/.rels": _rels([("officeDocument", "ppt/presentation.xml")]),
            "ppt/presentation.xml": (
                f'{head}<p:presentation {ns}><p:sldMasterIdLst><p:sldMasterId id="2147483648" r:id="rId1"/>'
                '</p:sldMasterIdLst><p:sldIdLst><p:sldId id="256" r:id="rId2"/></p:sldIdLst>'
                '<p:sldSz cx="9144000" cy="6858000"/><p:notesSz cx="6858000" cy="9144000"/></p:presentation>'
            ).encode(),
            "ppt/_rels/presentation.xml.rels": _rels([("slideMaster", "slideMasters/slideMaster1.xml"), ("slide", "slides/slide1.xml")]),
            "ppt/slideMasters/slideMaster1.xml": (
                f'{head}<p:sldMaster {ns}>{tree}<p:sldLayoutIdLst><p:sldLayoutId id="2147483649" r:id="rId1"/></p:sldLayoutIdLst></p:sldMaster>'
            ).encode(),
            "ppt/slideMasters/_rels/slideMaster1.xml.rels": _rels([("slideLayout", "../slideLayouts/slideLayout1.xml")]),
            "ppt/slideLayouts/slideLayout1.xml": f"{head}<p:sldLayout {ns}>{tree}</p:sldLayout>".encode(),
            "ppt/slideLayouts/_rels/slideLayout1.xml.rels": _rels([("slideMaster", "../slideMasters/slideMaster1.xml")]),
            "ppt/slides/slide1.xml": f"{head}<p:sld {ns}>{tree}</p:sld>".encode(),
            "ppt/slides/_rels/slide1.xml.rels": _rels([("slideLayout", "../slideLayouts/slideLayout1.xml")]),
        }
    )


def _pdf(name: str, seed: int) -> bytes:
    """One page of text, with a correct cross-reference table."""
    text = name.encode("latin-1", "replace").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
    lines = b"".join(b"BT /F1 12 Tf 72 %d Td (%s) Tj ET\n" % (720 - 16 * i, text) for i in range(1 + seed % 8))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(lines), lines),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _png(name: str, seed: int) -> bytes:
    width, height = 8 + seed % 24, 4 + seed % 12
    rows = b"".join(b"\x00" + b"".join(bytes((seed % 256, x * 9 % 256, y * 17 % 256)) for x in range(width)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _jpg(name: str, seed: int) -> bytes:
    """A baseline grayscale JPEG of flat 8x8 blocks, with one-symbol Huffman tables.

    Each block codes DC difference 0 (bit 0) and end-of-block (bit 0), so the scan is two zero
    bits per block, padded with ones. The comment segment carries the name.
    """
    blocks = 1 + seed % 6
    comment = f"Stand-in for {name}".encode()[:60000]
    quant = b"\x00" + bytes([1] * 64)
    frame = b"\x08" + struct.pack(">HH", 8, 8 * blocks) + b"\x01" + b"\x01\x11\x00"
    one_code = bytes([1] + [0] * 15)
    huffman = b"\x00" + one_code + b"\x00" + b"\x10" + one_code + b"\x00"
    scan_header = b"\x01\x01\x00\x00\x3f\x00"
    bits = "00" * blocks
    bits += "1" * (-len(bits) % 8)
    scan = bytes(int(bits[i : i + 8], 2) for i in range(0, len(bits), 8))
    return (
        b"\xff\xd8"
        + _segment(b"\xe0", b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
        + _segment(b"\xfe", comment)
        + _segment(b"\xdb", quant)
        + _segment(b"\xc0", frame)
        + _segment(b"\xc4", huffman)
        + _segment(b"\xda", scan_header)
        + scan
        + b"\xff\xd9"
    )


def _segment(marker: bytes, body: bytes) -> bytes:
    return b"\xff" + marker + struct.pack(">H", len(body) + 2) + body


def _wav(name: str, seed: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        frames = 400 + seed % 1600
        out.writeframes(b"".join(struct.pack("<h", (i * (seed % 50 + 1)) % 2000 - 1000) for i in range(frames)))
    return buffer.getvalue()


def _mp3(name: str, seed: int) -> bytes:
    """MPEG-1 Layer III frames at 128 kbit/s, 44.1 kHz, mono, no padding: 417 bytes each."""
    header = b"\xff\xfb\x90\xc4"
    frame = header + bytes(417 - len(header))
    return frame * (2 + seed % 10)


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload) + 8) + kind + payload


def _mp4(name: str, seed: int) -> bytes:
    """ftyp, a moov holding an mvhd (version 0), and an mdat whose size varies with the name."""
    ftyp = _box(b"ftyp", b"isom" + struct.pack(">I", 512) + b"isomiso2mp41")
    matrix = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
    mvhd = (
        b"\x00\x00\x00\x00"
        + struct.pack(">IIII", 0, 0, 1000, 1000 + seed % 5000)
        + struct.pack(">IH", 0x10000, 0x100)
        + bytes(10)
        + matrix
        + bytes(24)
        + struct.pack(">I", 2)
    )
    return ftyp + _box(b"moov", _box(b"mvhd", mvhd)) + _box(b"mdat", bytes(seed % 700))


def _zipfile(name: str, seed: int) -> bytes:
    return _zip({"README.txt": _text(name, seed), f"clips/clip-{seed % 10}.txt": b"x" * (seed % 300)})


def _step(name: str, seed: int) -> bytes:
    points = "".join(f"#{i}=CARTESIAN_POINT('',({i}.,{seed % 100}.,0.));\n" for i in range(1, 2 + seed % 9))
    return (
        "ISO-10303-21;\nHEADER;\nFILE_DESCRIPTION(('stand-in'),'2;1');\n"
        f"FILE_NAME('{name.replace(chr(39), '')}','2024-01-01T00:00:00',(''),(''),'','','');\n"
        "FILE_SCHEMA(('CONFIG_CONTROL_DESIGN'));\nENDSEC;\nDATA;\n"
        f"{points}ENDSEC;\nEND-ISO-10303-21;\n"
    ).encode()


def _psd(name: str, seed: int) -> bytes:
    """A flat 3-channel Photoshop file: header, empty sections, raw image data."""
    width, height = 4 + seed % 8, 4 + seed % 5
    header = b"8BPS" + struct.pack(">H6xHIIHH", 1, 3, height, width, 8, 3)
    empty_sections = struct.pack(">III", 0, 0, 0)
    return header + empty_sections + struct.pack(">H", 0) + bytes([seed % 256]) * (3 * width * height)


def _pages(name: str, seed: int) -> bytes:
    """Apple Pages documents are zip packages."""
    return _zip({"Index/Document.iwa": _text(name, seed), "Metadata/DocumentIdentifier": name.encode()})


_MAKERS: dict[str, Callable[[str, int], bytes]] = {
    "xlsx": _xlsx,
    "docx": _docx,
    "pptx": _pptx,
    "pdf": _pdf,
    "png": _png,
    "jpg": _jpg,
    "jpeg": _jpg,
    "wav": _wav,
    "mp3": _mp3,
    "mp4": _mp4,
    "zip": _zipfile,
    "step": _step,
    "stp": _step,
    "psd": _psd,
    "pages": _pages,
    "txt": _text,
}

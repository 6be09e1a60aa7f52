"""Stand-in reference files: every format real readers accept, deterministic, named as the rows say."""

from __future__ import annotations

import io
import re
import struct
import wave
import zipfile
import zlib
from pathlib import Path
from xml.etree import ElementTree

import pyarrow.parquet as pq
import pytest

from support.standins import make_standin_dataset, standin_bytes

OOXML_MAIN = {"xlsx": "xl/workbook.xml", "docx": "word/document.xml", "pptx": "ppt/presentation.xml"}


@pytest.fixture(scope="module")
def standins(sample_dataset, tmp_path_factory) -> Path:
    return make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("standins"))


def test_every_reference_named_by_the_rows_exists(standins, sample_dataset):
    rows = pq.read_table(standins / "data/train-00000-of-00001.parquet").column("reference_files").to_pylist()
    named = {path for paths in rows for path in paths}
    made = {p.relative_to(standins).as_posix() for p in (standins / "reference_files").rglob("*") if p.is_file()}
    assert made == named and len(named) == 50
    parquet = "data/train-00000-of-00001.parquet"
    assert (standins / parquet).read_bytes() == (sample_dataset / parquet).read_bytes()
    sizes = [p.stat().st_size for p in (standins / "reference_files").rglob("*.pdf")]
    assert len(set(sizes)) > 3


def test_content_is_deterministic(standins, sample_dataset, tmp_path):
    again = make_standin_dataset(sample_dataset, tmp_path / "again")
    for path in (standins / "reference_files").rglob("*"):
        if path.is_file():
            assert (again / path.relative_to(standins)).read_bytes() == path.read_bytes()


def check_ooxml(data: bytes, kind: str) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
        assert names[0] == "[Content_Types].xml" and OOXML_MAIN[kind] in names
        for name in names:
            ElementTree.fromstring(archive.read(name))
        types = archive.read("[Content_Types].xml").decode()
        assert f'PartName="/{OOXML_MAIN[kind]}"' in types


def check_pdf(data: bytes) -> None:
    assert data.startswith(b"%PDF-1.") and data.rstrip().endswith(b"%%EOF")
    xref = int(re.search(rb"startxref\n(\d+)", data)[1])
    assert data[xref:].startswith(b"xref")
    offsets = [int(m) for m in re.findall(rb"(\d{10}) 00000 n", data)]
    for number, offset in enumerate(offsets, 1):
        assert data[offset:].startswith(b"%d 0 obj" % number)


def check_png(data: bytes) -> None:
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    pos, kinds = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(kind + body)
        kinds.append(kind)
        pos += 12 + length
    assert kinds == [b"IHDR", b"IDAT", b"IEND"]
    width, height = struct.unpack(">II", data[16:24])
    assert len(zlib.decompress(data[41 : 41 + struct.unpack(">I", data[33:37])[0]])) == height * (1 + 3 * width)


def check_jpg(data: bytes) -> None:
    assert data.startswith(b"\xff\xd8") and data.endswith(b"\xff\xd9")
    for marker in (b"\xff\xdb", b"\xff\xc0", b"\xff\xc4", b"\xff\xda"):
        assert marker in data


def check_wav(data: bytes) -> None:
    with wave.open(io.BytesIO(data)) as audio:
        assert audio.getnframes() > 0 and audio.getsampwidth() == 2


def check_mp3(data: bytes) -> None:
    assert len(data) % 417 == 0 and len(data) >= 2 * 417
    for offset in range(0, len(data), 417):
        assert data[offset : offset + 2] == b"\xff\xfb"


def check_mp4(data: bytes) -> None:
    pos, boxes = 0, {}
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        assert size >= 8
        boxes[kind] = data[pos + 8 : pos + size]
        pos += size
    assert pos == len(data) and list(boxes)[:2] == [b"ftyp", b"moov"]
    moov = boxes[b"moov"]
    assert moov[4:8] == b"mvhd" and struct.unpack(">I", moov[:4])[0] == len(moov) == 108


def check_zip(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None and archive.namelist()


def check_step(data: bytes) -> None:
    text = data.decode()
    assert text.startswith("ISO-10303-21;") and text.rstrip().endswith("END-ISO-10303-21;")
    assert "HEADER;" in text and "DATA;" in text


def check_psd(data: bytes) -> None:
    assert data.startswith(b"8BPS\x00\x01")
    channels, height, width = struct.unpack(">HII", data[12:22])
    assert len(data) == 26 + 12 + 2 + channels * height * width


CHECKS = {
    "xlsx": lambda d: check_ooxml(d, "xlsx"),
    "docx": lambda d: check_ooxml(d, "docx"),
    "pptx": lambda d: check_ooxml(d, "pptx"),
    "pdf": check_pdf,
    "png": check_png,
    "jpg": check_jpg,
    "jpeg": check_jpg,
    "wav": check_wav,
    "mp3": check_mp3,
    "mp4": check_mp4,
    "zip": check_zip,
    "pages": check_zip,
    "step": check_step,
    "psd": check_psd,
    "txt": lambda d: d.decode(),
}


def test_sample_references_are_valid_files(standins):
    seen = set()
    for path in (standins / "reference_files").rglob("*"):
        if path.is_file():
            kind = path.suffix.lower().lstrip(".")
            CHECKS[kind](path.read_bytes())
            seen.add(kind)
    assert seen == {"xlsx", "pdf", "docx", "png", "wav", "zip", "jpg", "mp3", "pptx", "step"}


@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_every_supported_format_is_valid_in_any_case(kind):
    for name in (f"Report (1) & more.{kind}", f"ÜBERSICHT.{kind.upper()}"):
        CHECKS[kind](standin_bytes(name))

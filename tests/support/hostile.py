"""Hostile deliverables, small on disk, built by the tests that feed them to the renderer.

Each targets one parser: a zip bomb (one member that inflates a thousand-fold), XML entity
expansion (billion laughs) inside an xlsx, a PNG that declares ten billion pixels, an Office file
carrying a VBA project, and a PNG that is valid and modest on disk but large once decoded.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

from support.standins import standin_bytes

MIB = 1 << 20


def zip_bomb_docx(path: Path, inflated_mib: int = 64) -> Path:
    """A docx whose document.xml inflates from a few tens of KiB to `inflated_mib` MiB of spaces."""
    with zipfile.ZipFile(io.BytesIO(standin_bytes("memo.docx"))) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                bomb.writestr(info, source.read(info))
        with bomb.open("word/document.xml", "w", force_zip64=True) as member:
            member.write(b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>')
            for _ in range(inflated_mib):
                member.write(b" " * MIB)
            member.write(b"</w:body></w:document>")
    return path


def billion_laughs_xlsx(path: Path) -> Path:
    """An xlsx whose sheet declares ten levels of entities, each ten of the one before (10**10 'lol's)."""
    levels = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{k} "{f"&lol{k - 1};" * 10}">' for k in range(1, 10)]
    sheet = (
        f'<?xml version="1.0"?><!DOCTYPE worksheet [{"".join(levels)}]>'
        '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
        '<row r="1"><c r="A1" t="inlineStr"><is><t>&lol9;</t></is></c></row></sheetData></worksheet>'
    )
    return _replace_member(standin_bytes("model.xlsx"), "xl/worksheets/sheet1.xml", sheet.encode(), path)


def macro_xlsm(path: Path) -> Path:
    """An xlsx with a VBA project beside its sheets, as an .xlsm carries."""
    return _replace_member(standin_bytes("model.xlsx"), "xl/vbaProject.bin", b"\xd0\xcf\x11\xe0" + b"\0" * 512, path)


def _replace_member(original: bytes, name: str, data: bytes, path: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            if info.filename != name:
                out.writestr(info, source.read(info))
        out.writestr(name, data)
    return path


def png(path: Path, width: int, height: int, rows: int | None = None) -> Path:
    """An RGB PNG of `width` x `height` declared, all black; only `rows` rows of data when given (a lie)."""
    raw = zlib.compressobj(9)
    line = b"\0" * (1 + 3 * width)
    data = b"".join(raw.compress(line) for _ in range(height if rows is None else rows)) + raw.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b""))
    return path

"""Checks made on the host before any parser sees a file: zip members and XML declarations.

docx, xlsx, pptx and the OpenDocument formats are zip archives. Their central directory is read
(its size is bounded by the file's) and each member's declared size and compression ratio are
checked, so a zip bomb is refused before anything inflates it; then the first bytes of each XML
member are inflated (a bounded read) to refuse DOCTYPE and ENTITY declarations, which Office files
never carry and which XML entity tricks (billion laughs, external entities) need.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

ZIP_SUFFIXES = {".docx", ".docm", ".xlsx", ".xlsm", ".pptx", ".pptm", ".odt", ".ods", ".odp"}
MAX_MEMBERS = 5_000
MAX_MEMBER_BYTES = 256 << 20
MAX_TOTAL_BYTES = 1 << 30
MAX_RATIO = 200  # inflated over compressed size, for members above RATIO_FLOOR
RATIO_FLOOR = 4 << 20
XML_HEAD = 64 << 10  # a DOCTYPE comes before the root element, within the first bytes
DECLARATIONS = (b"<!DOCTYPE", b"<!ENTITY")


def refusal(path: Path, suffix: str) -> str:
    """Why `path` (read as `suffix`) must not be parsed, or "" when it may be."""
    if suffix not in ZIP_SUFFIXES:
        return ""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            return members_refusal([(i.filename, i.file_size, i.compress_size) for i in infos]) or _declarations(archive, infos)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"it is not a readable zip archive, as a {suffix} file must be ({exc.__class__.__name__}: {str(exc)[:200]})"


def members_refusal(members: list[tuple[str, int, int]]) -> str:
    """Why these (name, inflated size, compressed size) members make a zip bomb, or ""."""
    if len(members) > MAX_MEMBERS:
        return f"a zip of {len(members)} members, over the {MAX_MEMBERS} the renderer opens"
    total = 0
    for name, size, packed in members:
        if size > MAX_MEMBER_BYTES:
            return f"a zip bomb: member {name[:100]!r} inflates to {size:,} bytes (limit {MAX_MEMBER_BYTES:,})"
        if size > RATIO_FLOOR and size > MAX_RATIO * max(packed, 1):
            return f"a zip bomb: member {name[:100]!r} inflates {size // max(packed, 1)}-fold (limit {MAX_RATIO})"
        total += size
    if total > MAX_TOTAL_BYTES:
        return f"a zip bomb: its members inflate to {total:,} bytes (limit {MAX_TOTAL_BYTES:,})"
    return ""


def _declarations(archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> str:
    for info in infos:
        if info.filename.lower().endswith((".xml", ".rels")):
            with archive.open(info) as member:
                head = member.read(XML_HEAD)
            if declared(head):
                return f"member {info.filename[:100]!r} declares a DOCTYPE or entities (an XML entity attack; Office files never do)"
    return ""


def declared(head: bytes) -> bool:
    """Whether an XML text's head holds a DOCTYPE or ENTITY declaration (in UTF-8 or UTF-16)."""
    upper = head.upper()
    utf16 = head.decode("utf-16", errors="ignore").upper().encode() if head[:2] in (b"\xff\xfe", b"\xfe\xff") else b""
    return any(mark in upper or mark in utf16 for mark in DECLARATIONS)

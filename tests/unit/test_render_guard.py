"""The host-side checks before any parser sees a deliverable: zip directories, XML declarations, fonts."""

from __future__ import annotations

import io
import zipfile

from gdpval.render import guard
from gdpval.render.worker import kind_of, missing_fonts

MIB = 1 << 20


def test_zip_members_are_refused_by_size_ratio_total_and_count():
    assert guard.members_refusal([("word/document.xml", 3 * MIB, 200 * 1024), ("[Content_Types].xml", 1500, 400)]) == ""
    assert "inflates 1024-fold" in guard.members_refusal([("word/document.xml", 100 * MIB, 100 * 1024)])
    assert "inflates to" in guard.members_refusal([("xl/sharedStrings.xml", guard.MAX_MEMBER_BYTES + 1, guard.MAX_MEMBER_BYTES)])
    assert "members inflate to" in guard.members_refusal([(f"m{k}", 200 * MIB, 100 * MIB) for k in range(6)])
    assert "members" in guard.members_refusal([(f"m{k}", 1, 1) for k in range(guard.MAX_MEMBERS + 1)])
    assert guard.members_refusal([("small.xml", 3 * MIB, 1)]) == ""  # below the ratio floor a high ratio is harmless


def test_doctype_and_entity_declarations_are_found_in_utf8_and_utf16():
    assert guard.declared(b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x/>')
    assert guard.declared('<?xml version="1.0" encoding="UTF-16"?><!doctype x><x/>'.encode("utf-16"))
    assert not guard.declared(b'<?xml version="1.0" standalone="yes"?><w:document/>')


def test_a_non_zip_office_file_is_refused_and_other_kinds_are_not_checked(tmp_path):
    (tmp_path / "bad.pptx").write_bytes(b"PK\x03\x04 not really a presentation")
    assert "not a readable zip" in guard.refusal(tmp_path / "bad.pptx", ".pptx")
    assert guard.refusal(tmp_path / "bad.pptx", ".txt") == ""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/_rels/document.xml.rels", '<?xml version="1.0"?><!DOCTYPE r SYSTEM "file:///etc/passwd"><Relationships/>')
    (tmp_path / "xxe.docx").write_bytes(out.getvalue())
    assert "DOCTYPE or entities" in guard.refusal(tmp_path / "xxe.docx", ".docx")


def test_missing_fonts_ignore_case_and_kinds_follow_the_suffix():
    assert missing_fonts(["Calibri", "Aptos Display", "DejaVu Sans"], ["calibri", "DejaVu Sans"]) == ["Aptos Display"]
    assert [kind_of(s) for s in (".xlsm", ".docx", ".ppt", ".pdf", ".wav", ".step")] == [
        "spreadsheet",
        "document",
        "presentation",
        "pdf",
        "audio/video",
        "other",
    ]

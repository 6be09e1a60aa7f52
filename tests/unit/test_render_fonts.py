"""The fonts a document names, as a person reads them: XML character references decoded."""

from __future__ import annotations

import zipfile

from gdpval.render.worker import _named_fonts


def test_named_fonts_decode_character_references(tmp_path):
    path = tmp_path / "a.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/fontTable.xml", '<w:fonts><w:font w:name="&#x5B8B;&#x4F53;"/><w:font w:name="Calibri"/><w:font w:name="A &amp; B"/></w:fonts>')
        archive.writestr("word/theme/theme1.xml", '<a:latin typeface="+mn-lt"/><a:ea typeface="&#xFF2D;&#xFF33; &#x660E;&#x671D;"/>')
    assert _named_fonts(path) == sorted(["宋体", "Calibri", "A & B", "ＭＳ 明朝"])

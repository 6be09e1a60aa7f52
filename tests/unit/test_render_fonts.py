"""The fonts a document names, as a person reads them: XML character references decoded, a theme's
per-script fallbacks left out; a family with a metric-compatible stand-in here is not missing."""

from __future__ import annotations

import zipfile

from gdpval.render.worker import _named_fonts, missing_fonts


def test_named_fonts_decode_character_references(tmp_path):
    path = tmp_path / "a.docx"
    with zipfile.ZipFile(path, "w") as archive:
        styles = '<w:rFonts w:ascii="Calibri" w:eastAsia="&#x5B8B;&#x4F53;" w:hAnsi="A &amp; B" w:asciiTheme="minorHAnsi"/>'
        archive.writestr("word/styles.xml", styles + '<w:lang w:val="en-US" w:eastAsia="ja-JP"/>')
        archive.writestr("word/fontTable.xml", '<w:fonts><w:font w:name="Declared Only"/></w:fonts>')  # declared, not used
        archive.writestr("word/theme/theme1.xml", '<a:latin typeface="+mn-lt"/><a:ea typeface="&#xFF2D;&#xFF33; &#x660E;&#x671D;"/>')
    assert _named_fonts(path) == sorted(["宋体", "Calibri", "A & B", "ＭＳ 明朝"])


def test_a_themes_script_fallbacks_are_not_named_and_metric_twins_are_not_missing(tmp_path):
    path = tmp_path / "a.pptx"
    with zipfile.ZipFile(path, "w") as archive:
        theme = (
            '<a:minorFont><a:latin typeface="Calibri" panose="020F0502020204030204"/><a:ea typeface=""/>'
            '<a:font script="Thai" typeface="Angsana New"/></a:minorFont>'
        )
        archive.writestr("ppt/theme/theme1.xml", theme)
        archive.writestr("ppt/slides/slide1.xml", '<a:rPr lang="en-US"><a:latin typeface="Aptos Display"/><a:buFont typeface="Wingdings"/></a:rPr>')
    named = _named_fonts(path)
    assert named == ["Aptos Display", "Calibri", "Wingdings"]
    assert missing_fonts(named, ["Carlito", "DejaVu Sans"]) == ["Aptos Display", "Wingdings"]
    assert missing_fonts(["Arial", "Times New Roman"], ["DejaVu Sans"]) == ["Arial", "Times New Roman"]  # no twin here: missing

"""Deliverable names a grader on another OS can open: kept where safe, renamed with a reason where not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval.runner.deliverables import MAX_NAME_BYTES, collect, portable_name, upload
from gdpval.storage.local import LocalStorage


@pytest.mark.parametrize("name", ["résumé (1).docx", "Q3 report #2 & notes 50%.xlsx", "数据.csv", "a b.png", ".hidden"])
def test_safe_names_are_kept(name):
    assert portable_name(name) == (name, [])


@pytest.mark.parametrize(
    "name, stored, reason",
    [
        ("Q3: final?.xlsx", "Q3_ final_.xlsx", "forbid"),
        ("a\\b.csv", "a_b.csv", "forbid"),
        ('say "hi" <x>|y*.txt', "say _hi_ _x__y_.txt", "forbid"),
        ("notes. ", "notes", "trailing"),
        ("...", "_", "trailing"),
        ("CON", "_CON", "reserved"),
        ("lpt1.txt", "_lpt1.txt", "reserved"),
        ("aux.tar.gz", "_aux.tar.gz", "reserved"),
    ],
)
def test_unsafe_names_are_renamed_with_a_reason(name, stored, reason):
    new, reasons = portable_name(name)
    assert new == stored and any(reason in r for r in reasons)


def test_long_names_are_shortened_on_a_character_boundary_keeping_the_extension():
    new, reasons = portable_name("é" * 200 + ".xlsx")
    assert new.endswith(".xlsx") and len(new.encode()) <= MAX_NAME_BYTES and "é" in new
    assert reasons and "255 bytes" in reasons[0]
    assert len(portable_name("x" * 400)[0].encode()) == MAX_NAME_BYTES


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / "deliverable_files" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def test_collected_files_are_uploaded_under_portable_names_and_renames_recorded(tmp_path):
    workspace = _write(tmp_path / "ws", {"Q3: plan.docx": b"plan", "dir:x/CON.txt": b"con", "ok.md": b"ok"})
    collected = collect(workspace, max_file_bytes=1 << 20, max_files=10)
    store = LocalStorage(tmp_path / "out")
    uploaded = upload(collected, store, "d")
    assert sorted(uploaded) == ["Q3_ plan.docx", "dir_x/_CON.txt", "ok.md"]
    assert store.get_bytes("d/dir_x/_CON.txt") == b"con" and store.get_bytes("d/Q3_ plan.docx") == b"plan"
    assert {(r.path, r.stored_as) for r in collected.renamed} == {("Q3: plan.docx", "Q3_ plan.docx"), ("dir:x/CON.txt", "dir_x/_CON.txt")}
    assert not collected.refused


def test_a_rename_onto_a_taken_name_is_refused(tmp_path):
    workspace = _write(tmp_path / "ws", {"a:b.txt": b"renamed", "a_b.txt": b"original"})
    collected = collect(workspace, max_file_bytes=1 << 20, max_files=10)
    assert [f.key for f in collected.files] == ["a_b.txt"]
    assert [(r.path, "already taken" in r.reason) for r in collected.refused] == [("a:b.txt", True)]

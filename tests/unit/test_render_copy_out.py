"""The renderer copies the worker's result out of a folder the worker (a hostile file's parser) could write:
a link there must not make the host read one of its own files."""

from __future__ import annotations

import json

from gdpval.render.child import copy_out


def _result(folder, text: str) -> None:
    folder.mkdir(parents=True)
    (folder / "view.json").write_text(json.dumps({"text": text}))
    (folder / "page-0.png").write_bytes(b"\x89PNG page")


def test_the_result_and_its_pages_are_copied(tmp_path):
    _result(tmp_path / "work" / "out", "made by the worker")
    assert copy_out(tmp_path / "work", tmp_path / "kept")
    assert json.loads((tmp_path / "kept" / "view.json").read_text())["text"] == "made by the worker"
    assert (tmp_path / "kept" / "page-0.png").read_bytes() == b"\x89PNG page"


def test_an_out_folder_that_is_a_link_is_not_followed(tmp_path):
    _result(tmp_path / "host-secrets", "a host file")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "out").symlink_to(tmp_path / "host-secrets")
    assert not copy_out(tmp_path / "work", tmp_path / "kept")
    assert not (tmp_path / "kept" / "view.json").exists()


def test_linked_files_inside_out_are_not_followed(tmp_path):
    _result(tmp_path / "host-secrets", "a host file")
    (tmp_path / "work" / "out").mkdir(parents=True)
    (tmp_path / "work" / "out" / "view.json").symlink_to(tmp_path / "host-secrets" / "view.json")
    assert not copy_out(tmp_path / "work", tmp_path / "kept")


def test_a_kept_folder_planted_in_advance_is_refused(tmp_path):
    _result(tmp_path / "work" / "out", "made by the worker")
    (tmp_path / "kept").symlink_to(tmp_path / "elsewhere")
    assert not copy_out(tmp_path / "work", tmp_path / "kept")
    assert not (tmp_path / "elsewhere").exists()

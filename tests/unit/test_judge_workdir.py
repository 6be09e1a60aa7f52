"""The judges' work folders: what a killed judging left is removed by the next, a live one's never."""

from __future__ import annotations

import os

from gdpval.judge.workdir import remove_left_behind, work_folder

GONE = 4_194_305  # above Linux's largest pid_max: no process has it


def test_the_next_judging_removes_only_the_folders_of_judgings_that_are_gone(tmp_path):
    names = {
        "gone": f"gdpval-pairwise-{GONE}-abc",
        "older_version": "gdpval-judge-x1y2",
        "live": f"gdpval-pairwise-{os.getppid()}-def",
        "own": f"gdpval-judge-{os.getpid()}-ghi",
        "other": "gdpval-run-1-keep",
    }
    for name in names.values():
        (tmp_path / name / "gold").mkdir(parents=True)
    (tmp_path / "gdpval-pairwise-as-file").write_text("not a folder")
    removed = {p.name for p in remove_left_behind(str(tmp_path))}
    assert removed == {names["gone"], names["older_version"]}
    assert {p.name for p in remove_left_behind(str(tmp_path), own=True)} == {names["own"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names["live"], names["other"], "gdpval-pairwise-as-file"])


def test_a_work_folder_names_its_process_and_goes_when_the_block_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with work_folder("pairwise") as folder:
        assert os.path.basename(folder).startswith(f"gdpval-pairwise-{os.getpid()}-")
        assert os.path.dirname(folder) == str(tmp_path)
    assert not list(tmp_path.iterdir())

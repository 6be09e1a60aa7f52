"""The in-pod steps read only what their sample needs: its entry object and run.json, never the whole manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval.errors import GdpvalError
from gdpval.manifest import ReferenceFile
from gdpval.records import RunNotPrepared
from gdpval.runner.pod import run_sample, stage
from gdpval.runner.prepare import save_or_resume
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import runs

RUN = "r1"
TASKS = [runs.task(f"t{i}", prompt=f"Do task {i}.\u2028" + "x" * 2000) for i in range(20)]


class ReadLog(LocalStorage):
    """Storage that records every key a step reads."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.read: list[str] = []

    def get_bytes(self, key: str) -> bytes:
        self.read.append(key)
        return super().get_bytes(key)

    def get_file(self, key: str, dest: Path) -> None:
        self.read.append(key)
        super().get_file(key, dest)


def _prepared(tmp_path: Path) -> tuple[ReadLog, list]:
    storage = ReadLog(tmp_path / "out")
    entries = []
    for entry in runs.entries(TASKS):
        key = f"datasets/d/reference_files/{entry.task.task_id}/input.txt"
        storage.put_text(key, f"input of {entry.task.task_id}")
        entries.append(entry.model_copy(update={"references": [ReferenceFile(path=entry.task.reference_files[0], key=key)]}))
    save_or_resume(storage, runs.record(RUN), entries)
    storage.read.clear()
    return storage, entries


def test_stage_and_sample_read_their_entry_not_the_manifest(tmp_path):
    storage, entries = _prepared(tmp_path)
    entry = entries[7]
    sample = entry.sample.sample_id
    assert storage.exists(layout.entry(RUN, sample)) and storage.exists(layout.manifest(RUN))
    staged = stage(storage, RUN, sample, tmp_path / "refs")
    assert [p.read_text() for p in staged] == ["input of t7"]
    runs.commit(storage, RUN, entry, 1, runs.succeeded(entry, 1, {}))
    storage.read.clear()
    assert run_sample(storage, RUN, sample, 1, "http://unused").sample_id == sample  # committed already: no sandbox needed
    assert layout.manifest(RUN) not in storage.read
    assert set(storage.read) == {layout.run_json(RUN), layout.entry(RUN, sample), layout.result(RUN, sample, 1)}


def test_a_run_prepared_without_entry_objects_is_staged_from_its_manifest(tmp_path):
    storage, entries = _prepared(tmp_path)
    for key in list(storage.list(layout.entries(RUN))):
        storage.delete(key)
    staged = stage(storage, RUN, entries[3].sample.sample_id, tmp_path / "refs")
    assert [p.read_text() for p in staged] == ["input of t3"]
    with pytest.raises(GdpvalError, match="not in the run's manifest"):
        stage(storage, RUN, "nope-r0", tmp_path / "refs")
    with pytest.raises(RunNotPrepared, match="never prepared"):
        stage(storage, "other", "nope-r0", tmp_path / "refs")

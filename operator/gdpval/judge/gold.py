"""The experts' deliverables (the gold), for the pairwise judge alone.

They are mirrored once per dataset revision under layout.judge_only, a prefix nothing else reads:
the manifest, a sample's entry, the stage step and the submission builder only know reference keys.
The index is written after the files it lists, so a crash never leaves a listed file missing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from gdpval.dataset.loader import LoadedDataset, MissingReference
from gdpval.dataset.models import GOLD_REVISION, DatasetRef
from gdpval.errors import GdpvalError
from gdpval.storage import NotFound, Storage, layout


class NoGold(GdpvalError):
    """The run's dataset revision publishes no gold: pairwise judging against it is impossible."""


class GoldFile(BaseModel):
    path: str  # as in the dataset row: deliverable_files/<hash>/<name>
    key: str = ""  # the mirrored copy; empty when the dataset lacks the file
    size: int = 0


class GoldIndex(BaseModel):
    """layout.gold_index: the revision's gold, per task, as far as it was mirrored."""

    dataset: DatasetRef
    has_gold: bool
    tasks: dict[str, list[GoldFile]] = Field(default_factory=dict)

    def name(self, file: GoldFile) -> str:
        """The file name the expert gave it (the hash folder says nothing to a judge)."""
        return file.path.split("/", 2)[-1]


def refusal(run: str, ref: DatasetRef) -> NoGold:
    return NoGold(
        f"run {run!r} pinned {ref.location}@{ref.revision}, a dataset revision without the experts' deliverables: pairwise judging needs {GOLD_REVISION}"
    )


def read_index(storage: Storage, ref: DatasetRef) -> GoldIndex | None:
    try:
        return GoldIndex.model_validate_json(storage.get_bytes(layout.gold_index(ref.key)))
    except (NotFound, ValidationError):
        return None


_LOCK = threading.Lock()


def ensure_gold(storage: Storage, run: str, ref: DatasetRef, task_ids: set[str], dataset: Callable[[], LoadedDataset]) -> GoldIndex:
    """The index covering `task_ids`, mirroring what is missing from `dataset()` (loaded only then); NoGold refuses."""
    with _LOCK:
        index = read_index(storage, ref)
        if index is not None and not index.has_gold:
            raise refusal(run, ref)
        if index is not None and task_ids <= set(index.tasks):
            return index
        loaded = dataset()
        if loaded.gold is None:
            storage.put_text(layout.gold_index(ref.key), GoldIndex(dataset=ref, has_gold=False).model_dump_json(indent=2))
            raise refusal(run, ref)
        tasks = dict(index.tasks) if index is not None else {}
        for task_id in sorted(task_ids - set(tasks)):
            tasks[task_id] = [mirror(storage, loaded, path) for path in loaded.gold.get(task_id, [])]
        index = GoldIndex(dataset=ref, has_gold=True, tasks=tasks)
        storage.put_text(layout.gold_index(ref.key), index.model_dump_json(indent=2))
        return index


def mirror(storage: Storage, dataset: LoadedDataset, path: str) -> GoldFile:
    """One gold file copied under the judge-only prefix (once); a file the dataset lacks keeps an empty key."""
    key = layout.gold_file(dataset.ref.key, path)
    try:
        local: Path = dataset.fetch_gold(path)
    except MissingReference:
        return GoldFile(path=path)
    if not storage.exists(key):
        storage.put_file(key, local)
    return GoldFile(path=path, key=key, size=local.stat().st_size)

"""`load_dataset`: one entry point for ModelScope ids, local folders and s3:// prefixes.

Whatever the source, the result is the same: a pinned DatasetRef, typed tasks, and a way to get a
reference file as a local path (fetched once per revision into the cache, or used in place).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gdpval.dataset.errors import DatasetError, MissingReference
from gdpval.dataset.local_source import LocalFolder
from gdpval.dataset.models import DatasetRef, Task
from gdpval.dataset.modelscope_source import DEFAULT_DATASET, ModelScopeRepo
from gdpval.dataset.parquet import Gold, check_unique, content_revision, read_gold, read_tasks
from gdpval.dataset.references import Absent, FileCache, gold_path, reference_path
from gdpval.dataset.s3_source import S3Prefix

__all__ = ["DEFAULT_DATASET", "DatasetError", "LoadedDataset", "MissingReference", "load_dataset", "source_kind"]

SourceKind = Literal["modelscope", "local", "s3"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_LOCAL_PREFIXES = ("/", "./", "../", "~")


def source_kind(source: str) -> SourceKind:
    """Tell a local folder from an s3:// prefix from a ModelScope `owner/name` id."""
    if source.startswith("s3://"):
        return "s3"
    if "://" in source:
        raise DatasetError(f"unsupported dataset {source!r}: use a folder, s3://bucket/prefix or a ModelScope id")
    if source in (".", "..") or source.startswith(_LOCAL_PREFIXES) or Path(source).exists():
        return "local"
    if _HUB_ID.match(source):
        return "modelscope"
    raise DatasetError(f"dataset {source!r} is neither an existing folder, an s3:// prefix nor a ModelScope id like {DEFAULT_DATASET}")


@dataclass
class LoadedDataset:
    """Tasks of one pinned dataset revision plus access to its reference files, and the gold for the judge.

    `gold` maps task ids to the experts' deliverable paths; None when the revision has no gold column.
    Only the judge reads it (judge.gold); tasks, manifests and submissions never carry it.
    """

    ref: DatasetRef
    tasks: list[Task]
    opener: Callable[[str], Path] = field(repr=False)
    gold: Gold | None = field(default=None, repr=False)

    def fetch_reference(self, dataset_path: str) -> Path:
        """A local file for `reference_files/<hash>/<name>`; MissingReference when absent."""
        reference_path(dataset_path)
        try:
            return self.opener(dataset_path)
        except Absent:
            owners = [t.task_id for t in self.tasks if dataset_path in t.reference_files]
            raise MissingReference(dataset_path, f"{self.ref.location}@{self.ref.revision}", owners) from None

    def fetch_gold(self, dataset_path: str) -> Path:
        """A local file for `deliverable_files/<hash>/<name>`; MissingReference when absent."""
        gold_path(dataset_path)
        try:
            return self.opener(dataset_path)
        except Absent:
            owners = [task for task, paths in (self.gold or {}).items() if dataset_path in paths]
            raise MissingReference(dataset_path, f"{self.ref.location}@{self.ref.revision}", owners) from None

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.task_id == task_id:
                return task
        raise KeyError(task_id)


def load_dataset(source: str, *, revision: str | None, split: str = "train", cache_dir: Path) -> LoadedDataset:
    """Resolve `source`, pin its revision and parse the split's tasks (gold columns dropped)."""
    kind = source_kind(source)
    if kind == "modelscope":
        return _load_hub(source, revision, split, cache_dir)
    folder = LocalFolder(Path(source).expanduser()) if kind == "local" else S3Prefix(source)
    blobs = folder.parquet_blobs(split)
    ref = DatasetRef(source=kind, location=folder.location, revision=content_revision(blobs))
    if revision and revision != ref.revision:
        raise DatasetError(
            f"dataset {ref.location} has content revision {ref.revision}, not {revision}: "
            "its files changed since the run was pinned; drop --revision or restore the data"
        )
    tasks = check_unique([t for name, data in blobs for t in read_tasks(f"{ref.location}/{name}", data)], ref.location)
    gold = _gold(ref.location, blobs)
    if isinstance(folder, LocalFolder):
        return LoadedDataset(ref, tasks, folder.open_reference, gold)
    cache = FileCache(cache_dir / ref.key, folder.download)
    return LoadedDataset(ref, tasks, cache.get, gold)


def _gold(location: str, blobs: list[tuple[str, bytes]]) -> Gold | None:
    """The gold of every parquet file, or None when any of them lacks the gold column."""
    merged: Gold = {}
    for name, data in blobs:
        part = read_gold(f"{location}/{name}", data)
        if part is None:
            return None
        merged |= part
    return merged


def _load_hub(repo_id: str, revision: str | None, split: str, cache_dir: Path) -> LoadedDataset:
    repo = ModelScopeRepo(repo_id, revision)
    ref = DatasetRef(source="modelscope", location=repo_id, revision=repo.revision)
    cache = FileCache(cache_dir / ref.key, repo.download)
    blobs = []
    for name in repo.parquet_names(split):
        try:
            blobs.append((name, cache.get(name).read_bytes()))
        except Absent:
            raise DatasetError(f"{name} vanished from ModelScope dataset {repo_id}@{ref.revision}: retry") from None
    tasks = check_unique([t for name, data in blobs for t in read_tasks(f"{repo_id}/{name}", data)], repo_id)
    return LoadedDataset(ref, tasks, cache.get, _gold(repo_id, blobs))

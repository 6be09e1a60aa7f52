"""What a judge call is made of, fetched to a scratch folder: reference files, a run's deliverables, the gold.

Each file is named as its owner named it and carries the digest of its bytes, so a call's cache key
is known before anything is rendered. The dataset is loaded only when a file is not in storage
(references of a local run, gold not yet mirrored), once per judge run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gdpval.dataset.errors import DatasetError
from gdpval.dataset.loader import LoadedDataset, load_dataset
from gdpval.judge.convert import View, view_file
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.render.cache import file_digest
from gdpval.storage import Storage, StorageError


@dataclass(frozen=True)
class Fetched:
    name: str  # as shown to the judge
    path: Path | None  # None when the file could not be fetched
    digest: str  # sha256 of the bytes, or of the reason it is missing

    def view(self) -> View:
        if self.path is None:
            return View(self.name, "missing", f"[the file could not be fetched: {self.digest}]")
        return view_file(self.path, self.name)


def render(files: list[Fetched]) -> tuple[list[View], float]:
    """The views of `files` and the seconds the conversion took."""
    start = time.monotonic()
    views = [file.view() for file in files]
    return views, time.monotonic() - start


@dataclass
class Inputs:
    """Fetches a run's judge inputs from its storage, and from its pinned dataset where storage lacks them."""

    storage: Storage
    record: RunRecord
    cache_dir: Path
    _dataset: LoadedDataset | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def dataset(self) -> LoadedDataset:
        """The run's dataset at its pinned revision, loaded on first use."""
        with self._lock:
            if self._dataset is None:
                ref = self.record.dataset
                self._dataset = load_dataset(ref.location, revision=ref.revision, split=self.record.settings.dataset.split, cache_dir=self.cache_dir)
            return self._dataset

    def references(self, entry: ManifestEntry, into: Path) -> list[Fetched]:
        fetched = []
        for ref in entry.references:
            name = ref.path.split("/", 2)[-1]
            try:
                if ref.key:
                    fetched.append(self.from_storage(ref.key, name, into))
                else:
                    fetched.append(_local(name, self.dataset().fetch_reference(ref.path)))
            except (DatasetError, StorageError) as exc:
                fetched.append(Fetched(name, None, f"{exc.__class__.__name__}: {exc}"))
        return fetched

    def from_storage(self, key: str, name: str, into: Path) -> Fetched:
        into.mkdir(parents=True, exist_ok=True)
        local = into / f"{len(list(into.iterdir()))}{PurePosixPath(name).suffix[:16]}"
        self.storage.get_file(key, local)
        return _local(name, local)


def _local(name: str, path: Path) -> Fetched:
    return Fetched(name, path, file_digest(path))

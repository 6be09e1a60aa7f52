"""A local cache that fetches each dataset file once per revision, atomically.

Several samples may need the same reference at the same time; a per-path lock makes the second
caller wait for the first download instead of starting another, and temp-then-rename means a
crash never leaves a half-written file under the final name.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from gdpval.dataset.errors import DatasetError

REFERENCE_PREFIX = "reference_files/"
GOLD_PREFIX = "deliverable_files/"


class Absent(Exception):
    """Raised by a download function when the dataset has no such file."""


def safe_relative(path: str) -> PurePosixPath:
    """A dataset path that stays inside the dataset root (no absolute parts, no `..`)."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or any(part in ("", ".", "..") for part in path.split("/")):
        raise DatasetError(f"dataset path {path!r} is not a plain relative path")
    return pure


def reference_path(path: str) -> PurePosixPath:
    """Check that `path` names a reference file: `reference_files/<hash>/<name>`."""
    return _hashed_path(path, REFERENCE_PREFIX, "a reference file")


def gold_path(path: str) -> PurePosixPath:
    """Check that `path` names an expert's deliverable (the gold): `deliverable_files/<hash>/<name>`."""
    return _hashed_path(path, GOLD_PREFIX, "a gold deliverable")


def _hashed_path(path: str, prefix: str, what: str) -> PurePosixPath:
    pure = safe_relative(path)
    if not path.startswith(prefix) or len(pure.parts) < 3:
        raise DatasetError(f"{path!r} is not {what} path: expected {prefix}<hash>/<name>")
    return pure


Download = Callable[[str, Path], None]


class FileCache:
    """Files of one dataset revision under `root`, keyed by their dataset path."""

    def __init__(self, root: Path, download: Download):
        self.root = root
        self._download = download
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def get(self, path: str) -> Path:
        """The cached copy of `path`, downloading it first if needed; raises Absent."""
        dest = self.root / safe_relative(path)
        if dest.is_file():
            return dest
        with self._lock(path):
            if not dest.is_file():
                self._fetch(path, dest)
        return dest

    def _lock(self, path: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(path, threading.Lock())

    def _fetch(self, path: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".tmp-{uuid.uuid4().hex}{dest.suffix[:16]}")
        try:
            self._download(path, tmp)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)

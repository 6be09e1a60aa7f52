"""Local-folder storage; atomic writes through a temp file and rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gdpval.storage.base import NotFound, Storage, StorageError


class LocalStorage(Storage):
    def __init__(self, root: Path):
        self.root = root.resolve()
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents and path != self.root:
            raise StorageError(f"key {key!r} escapes the storage root")
        return path

    def _atomic(self, key: str, write) -> None:
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def put_bytes(self, key: str, data: bytes) -> None:
        self._atomic(key, lambda out: out.write(data))

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as src:
            self._atomic(key, lambda out: shutil.copyfileobj(src, out))

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"{self.url(key)} does not exist") from None

    def get_file(self, key: str, dest: Path) -> None:
        src = self._path(key)
        if not src.is_file():
            raise NotFound(f"{self.url(key)} does not exist")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str) -> Iterator[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return iter(())
        keys = (p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file() and not p.name.startswith(".tmp-"))
        return iter(sorted(keys))

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create output folder {self.root}: {exc.strerror}") from None
        if not os.access(self.root, os.W_OK):
            raise StorageError(f"output folder {self.root} is not writable")

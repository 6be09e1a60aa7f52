"""The storage interface: keys are `/`-separated paths under a root URI."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path

from gdpval.errors import GdpvalError


class StorageError(GdpvalError):
    """A storage problem with a message that says what to fix."""


class NotFound(StorageError):
    pass


class Storage(ABC):
    """Writes are whole-object: a reader never sees half an object."""

    uri: str

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None: ...

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> None: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove one object; a missing one is not an error."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Keys under `prefix` (a folder, `/` implied), recursively, sorted."""

    @abstractmethod
    def check(self) -> None:
        """Fail early, with what to fix, if the root cannot be written."""

    def url(self, key: str) -> str:
        return f"{self.uri.rstrip('/')}/{key}"

    def put_text(self, key: str, text: str) -> None:
        self.put_bytes(key, text.encode())

    def get_text(self, key: str) -> str:
        return self.get_bytes(key).decode()

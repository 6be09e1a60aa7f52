"""A dataset under an s3:// prefix in the Hugging Face layout (endpoint from AWS_ENDPOINT_URL)."""

from __future__ import annotations

from pathlib import Path

from gdpval.dataset.errors import DatasetError
from gdpval.dataset.parquet import split_files
from gdpval.dataset.references import Absent, safe_relative
from gdpval.storage import NotFound, StorageError
from gdpval.storage.s3 import S3Storage


class S3Prefix:
    kind = "s3"

    def __init__(self, uri: str, storage: S3Storage | None = None):
        try:
            self.storage = storage or S3Storage.from_uri(uri)
        except StorageError as exc:
            raise DatasetError(f"dataset {uri}: {exc}") from None
        self.location = self.storage.uri

    def parquet_blobs(self, split: str) -> list[tuple[str, bytes]]:
        """(dataset path, bytes) of the split's parquet files."""
        try:
            self.storage.check()
            names = list(self.storage.list("data"))
            chosen = split_files(names, split)
            if not chosen:
                raise DatasetError(
                    f"{self.location} has no parquet file for split {split!r} under data/ "
                    f"(found {len(names)} object(s) there): expected data/{split}-00000-of-00001.parquet"
                )
            return [(name, self.storage.get_bytes(name)) for name in chosen]
        except StorageError as exc:
            raise DatasetError(f"dataset {self.location}: {exc}") from None

    def download(self, path: str, dest: Path) -> None:
        """Copy one object to `dest`; raises Absent when the prefix lacks it."""
        try:
            self.storage.get_file(safe_relative(path).as_posix(), dest)
        except NotFound:
            raise Absent(path) from None
        except StorageError as exc:
            raise DatasetError(f"cannot fetch {path} from dataset {self.location}: {exc}") from None

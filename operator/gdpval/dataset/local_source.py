"""A dataset folder in the Hugging Face layout, read in place (references are never copied)."""

from __future__ import annotations

from pathlib import Path

from gdpval.dataset.errors import DatasetError
from gdpval.dataset.parquet import split_files
from gdpval.dataset.references import Absent, safe_relative


class LocalFolder:
    kind = "local"

    def __init__(self, root: Path):
        if not root.exists():
            raise DatasetError(f"dataset folder {root} does not exist: check --dataset")
        if not root.is_dir():
            raise DatasetError(f"dataset path {root} is a file, not a folder with data/*.parquet")
        self.root = root.resolve()
        self.location = str(self.root)

    def parquet_blobs(self, split: str) -> list[tuple[str, bytes]]:
        """(dataset path, bytes) of the split's parquet files."""
        names = [p.relative_to(self.root).as_posix() for p in (self.root / "data").rglob("*.parquet")]
        chosen = split_files(names, split)
        if not chosen:
            found = ", ".join(sorted(names)) or "none"
            raise DatasetError(
                f"{self.root} has no parquet file for split {split!r} under data/ (found: {found}): "
                "expected the Hugging Face layout, e.g. data/train-00000-of-00001.parquet"
            )
        return [(name, (self.root / name).read_bytes()) for name in chosen]

    def open_reference(self, path: str) -> Path:
        """The file inside the folder itself; raises Absent when the folder lacks it."""
        file = self.root / safe_relative(path)
        if not file.is_file():
            raise Absent(path)
        return file

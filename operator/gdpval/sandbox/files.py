"""The files a sandbox gets: its references, checked before it starts, and what bubblewrap copies in."""

from __future__ import annotations

from pathlib import Path

from gdpval import contract

TOOLSERVER = Path(__file__).with_name("toolserver.py")
STAGED_FD = "staged-"  # descriptors of the files bubblewrap copies in (see staged)


def check_dataset_path(dataset_path: str) -> None:
    parts = dataset_path.split("/")
    if len(parts) < 3 or parts[0] != "reference_files" or "\x00" in dataset_path or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"reference path {dataset_path!r} is not reference_files/<hash>/<name>")


def checked_references(references: dict[str, Path]) -> dict[str, Path]:
    """Fail before starting if a reference file is missing: never a silent skip."""
    checked: dict[str, Path] = {}
    for dataset_path, host in references.items():
        check_dataset_path(dataset_path)
        host = Path(host).absolute()
        if not host.is_file():
            raise FileNotFoundError(f"reference file {dataset_path} is missing (expected at {host})")
        checked[dataset_path] = host
    return checked


def staged(references: dict[str, Path]) -> dict[str, Path]:
    """The files bubblewrap copies into the sandbox (its place there: the host file), not binds: a bind's
    mount root in /proc/self/mountinfo is its host path (the dataset folder, this package's), a copy's
    is bubblewrap's own tmpfs. They are read through descriptors the runner opened, so a root
    runner's dropped uid reads references it could not open itself. A pod's stage copies them too."""
    return {**{f"/{dataset_path}": host for dataset_path, host in sorted(references.items())}, contract.TOOLSERVER: TOOLSERVER}

"""Runs made for the pairwise judge: tasks of the stress dataset, each sample committed with files whose text the
scripted judge can prefer (`--judge-prefers text:WIN-ME`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gdpval.dataset.loader import LoadedDataset, load_dataset
from gdpval.manifest import ManifestEntry
from gdpval.storage import Storage
from support import runs, stress
from support.standins import standin_bytes

MARK, PLAIN = "WIN-ME", "LOSE-ME"


def stress_dataset(root: Path) -> LoadedDataset:
    """The stress dataset's current revision (13 columns, gold stand-ins) written under `root` and loaded."""
    return load_dataset(str(stress.make_stress_dataset(root / "current", "current")), revision=None, cache_dir=root / "cache")


def make_run(
    storage: Storage,
    dataset: LoadedDataset,
    run: str,
    tasks: int,
    marked: Callable[[int], bool] = lambda i: i % 2 == 1,
    repeats: int = 1,
    skip: tuple[int, ...] = (),
    extra: tuple[str, ...] = (),
) -> list[ManifestEntry]:
    """`tasks` tasks of the dataset, each sample committed with one docx whose text carries MARK where `marked(i)`
    (i counts samples), else PLAIN, plus stand-ins named `extra`; samples in `skip` are never committed."""
    entries = runs.entries(dataset.tasks[:tasks], repeats)
    runs.write_run(storage, run, entries, repeats, dataset.ref)
    for i, entry in enumerate(entries):
        if i in skip:
            continue
        files = {"answer.docx": standin_bytes(f"{MARK if marked(i) else PLAIN} answer {run} {i}.docx")}
        files |= {name: standin_bytes(name) for name in extra}
        runs.commit(storage, run, entry, 1, runs.succeeded(entry, 1, files), files)
    return entries

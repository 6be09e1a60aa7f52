"""Runs made for the pairwise judge: tasks of the stress dataset, each sample committed with files whose text the
scripted judge can prefer (`--judge-prefers text:WIN-ME`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

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


# The scripted model's inventory says this only when its task has reference files; a judge started with
# judge_prefers=PREFER_GOLD_ON_REFERENCES so prefers the gold on those tasks (a loss) and ties on the rest.
INVENTORY_OF_REFERENCES = "Reference root:"
PREFER_GOLD_ON_REFERENCES = f"not-text:{INVENTORY_OF_REFERENCES}"


def expected_verdicts(rows: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """(wins, ties, losses) of a scripted run over the dataset `rows` judged with PREFER_GOLD_ON_REFERENCES, by
    sector and overall (under "")."""
    totals: dict[str, tuple[int, int, int]] = {}
    for row in rows:
        loss = 1 if row["reference_files"] else 0
        for group in ("", row["sector"]):
            wins, ties, losses = totals.get(group, (0, 0, 0))
            totals[group] = (wins, ties + 1 - loss, losses + loss)
    return totals

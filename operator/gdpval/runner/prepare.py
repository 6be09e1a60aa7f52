"""Resolving a run before any sample starts: dataset pinned, samples chosen, manifest written.

A second call with the same run name reuses what the first wrote (that is how runs resume), and
refuses if the dataset, selection or model differ, so one run never mixes two setups.
"""

from __future__ import annotations

import time

from gdpval import __version__
from gdpval.dataset.loader import LoadedDataset, MissingReference
from gdpval.dataset.selection import select
from gdpval.errors import GdpvalError
from gdpval.manifest import (
    AgentSettings,
    ManifestEntry,
    ModelSettings,
    ReferenceFile,
    RunRecord,
    Selection,
    dump_manifest,
    load_manifest,
)
from gdpval.storage import NotFound, Storage, layout

IMMUTABLE = ("dataset", "split", "selection")


def plan(
    run_name: str,
    dataset: LoadedDataset,
    split: str,
    selection: Selection,
    model: ModelSettings,
    agent: AgentSettings,
) -> tuple[RunRecord, list[ManifestEntry]]:
    """The run record and one manifest entry per selected sample (pure apart from the clock)."""
    record = RunRecord(
        run_name=run_name,
        dataset=dataset.ref,
        split=split,
        selection=selection,
        model=model,
        agent=agent,
        created_at=time.time(),
        gdpval_version=__version__,
    )
    tasks = {task.task_id: task for task in dataset.tasks}
    entries = [
        ManifestEntry(
            sample=sample,
            task=tasks[sample.task_id],
            references=[ReferenceFile(path=path, key="") for path in tasks[sample.task_id].reference_files],
        )
        for sample in select(dataset.tasks, selection)
    ]
    return record, entries


def mirror_references(storage: Storage, dataset: LoadedDataset, entries: list[ManifestEntry]) -> list[ManifestEntry]:
    """Copy each needed reference file once into the shared, revision-keyed mirror (for pods).

    A reference missing from the dataset keeps an empty key: only its sample fails, not the run.
    """
    root = layout.dataset_refs(dataset.ref.key)
    mirrored: list[ManifestEntry] = []
    for entry in entries:
        refs = []
        for ref in entry.references:
            key = f"{root}/{ref.path.removeprefix('reference_files/')}"
            try:
                local = dataset.fetch_reference(ref.path)
            except MissingReference:
                refs.append(ReferenceFile(path=ref.path, key=""))
                continue
            if not storage.exists(key):
                storage.put_file(key, local)
            refs.append(ReferenceFile(path=ref.path, key=key, size=local.stat().st_size))
        mirrored.append(entry.model_copy(update={"references": refs}))
    return mirrored


def save_or_resume(
    storage: Storage, record: RunRecord, entries: list[ManifestEntry]
) -> tuple[RunRecord, list[ManifestEntry], bool]:
    """Write run.json and the manifest, or return the stored ones when the run already exists."""
    try:
        stored = RunRecord.model_validate_json(storage.get_text(layout.run_json(record.run_name)))
    except NotFound:
        storage.put_text(layout.manifest(record.run_name), dump_manifest(entries))
        storage.put_text(layout.run_json(record.run_name), record.model_dump_json(indent=2))
        return record, entries, False
    check_compatible(stored, record)
    return stored, load_manifest(storage.get_text(layout.manifest(record.run_name))), True


def check_compatible(stored: RunRecord, wanted: RunRecord) -> None:
    changed = [name for name in IMMUTABLE if getattr(stored, name) != getattr(wanted, name)]
    if stored.model.name != wanted.model.name:
        changed.append("model")
    if changed:
        raise GdpvalError(
            f"run {stored.run_name!r} already exists with a different {', '.join(changed)}: "
            "choose a new --run-name, or repeat the original settings to resume it"
        )

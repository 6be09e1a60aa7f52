"""Resolving a run before any sample starts: settings fixed, dataset pinned, manifest written.

A second call with the same run name reuses what the first wrote (that is how runs resume): the
stored settings stand, flags given again may only repeat the pinned ones, so one run never mixes
two setups.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gdpval import __version__
from gdpval.dataset.loader import LoadedDataset, MissingReference, load_dataset
from gdpval.dataset.selection import select
from gdpval.errors import GdpvalError, RunConflict
from gdpval.manifest import ManifestEntry, ReferenceFile, RunOwner, RunRecord
from gdpval.records import find_record, load_entries, record_url, save_run
from gdpval.settings import Change, Path_, RunSettings, flag_specs, nest, resume_settings, wire_path
from gdpval.storage import Storage, layout


def settings_for(stored: RunRecord | None, given: dict[Path_, Any], flags: bool = True) -> RunSettings:
    """The run's settings: new from what was given, or the stored ones with pinned values unchanged."""
    try:
        if stored is None:
            return RunSettings.model_validate(nest(given))
        wanted, changes = resume_settings(stored.settings, given)
    except ValidationError as exc:
        raise GdpvalError(describe_invalid(exc, flags)) from None
    revision = given.get(("dataset", "revision"))
    if revision and revision != stored.dataset.revision:
        changes.append(Change(("dataset", "revision"), stored.dataset.revision, revision))
    if changes:
        raise RunConflict(describe_changes(stored.run_name, changes, flags))
    return wanted


def _name(path: Path_, flags: bool) -> str:
    if flags:
        return next(spec.flag for spec in flag_specs() if spec.path == path)
    return "spec." + ".".join(wire_path(path))


def describe_invalid(exc: ValidationError, flags: bool) -> str:
    """One line per bad setting, named as the user wrote it (a flag, or a spec path)."""
    by_loc = {}
    for spec in flag_specs():
        by_loc[spec.path] = by_loc[wire_path(spec.path)] = spec.path
    problems = []
    for error in exc.errors()[:5]:
        loc = tuple(str(p) for p in error["loc"])
        path = next((by_loc[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in by_loc), None)
        name = _name(path, flags) if path else ".".join(loc)
        problems.append(f"{name}: {error['msg']}")
    return "invalid settings: " + "; ".join(problems)


def describe_changes(run: str, changes: list[Change], flags: bool) -> str:
    listed = ", ".join(f"{_name(c.path, flags)} {c.given!r} (the run has {c.stored!r})" for c in changes)
    what = "drop those flags to resume it with its own settings" if flags else "restore those fields"
    return f"run {run!r} already exists with other settings: {listed}; {what}, or choose a new run name"


def check_owner(storage: Storage, stored: RunRecord | None, owner: RunOwner | None) -> None:
    """A cluster run resumes only its own run.json: another GdpvalRun's, or one without an owner
    (a local run, an operator before owners were recorded), is refused, never overwritten or adopted."""
    if owner is None or stored is None or stored.owner == owner:
        return
    writer = str(stored.owner) if stored.owner else "a run without an owner (gdpval run, or an older operator)"
    raise RunConflict(
        f"{record_url(storage, stored.run_name)} belongs to {writer}, not to {owner}: "
        "delete that folder if its results are not needed, or create a new GdpvalRun (it gets its own folder)"
    )


def plan(run_name: str, settings: RunSettings, dataset: LoadedDataset, owner: RunOwner | None = None) -> tuple[RunRecord, list[ManifestEntry]]:
    """The run record and one manifest entry per selected sample (pure apart from the clock)."""
    record = RunRecord(run_name=run_name, owner=owner, settings=settings, dataset=dataset.ref, created_at=time.time(), gdpval_version=__version__)
    tasks = {task.task_id: task for task in dataset.tasks}
    entries = [
        ManifestEntry(
            sample=sample,
            task=tasks[sample.task_id],
            references=[ReferenceFile(path=path, key="") for path in tasks[sample.task_id].reference_files],
        )
        for sample in select(dataset.tasks, settings.selection)
    ]
    return record, entries


def load_and_plan(
    storage: Storage, run_name: str, given: dict[Path_, Any], cache_dir: Path, flags: bool = True, owner: RunOwner | None = None
) -> tuple[LoadedDataset, RunRecord, list[ManifestEntry]]:
    """Settings (stored ones on resume), the dataset at the run's pinned revision, and the samples."""
    stored = find_record(storage, run_name)
    check_owner(storage, stored, owner)
    settings = settings_for(stored, given, flags)
    revision = stored.dataset.revision if stored else settings.dataset.revision
    source = settings.dataset
    dataset = load_dataset(source.id, revision=revision, split=source.split, cache_dir=cache_dir)
    record, entries = plan(run_name, settings, dataset, owner)
    return dataset, record, entries


def mirror_references(storage: Storage, dataset: LoadedDataset, entries: list[ManifestEntry]) -> list[ManifestEntry]:
    """Copy each needed reference file once into the shared, revision-keyed mirror (for pods).

    A reference missing from the dataset keeps an empty key: only its sample fails, not the run.
    """
    mirrored: list[ManifestEntry] = []
    for entry in entries:
        refs = []
        for ref in entry.references:
            key = layout.dataset_ref(dataset.ref.key, ref.path)
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


def save_or_resume(storage: Storage, record: RunRecord, entries: list[ManifestEntry]) -> tuple[RunRecord, list[ManifestEntry], bool]:
    """Write each sample's entry, the manifest, then run.json (the run exists once run.json does), or read the stored ones.

    A resumed run keeps its stored manifest; its record takes the settings that may change
    (parallelism) from this call.
    """
    run = record.run_name
    stored = find_record(storage, run)
    if stored is None:
        save_run(storage, record, entries)
        return record, entries, False
    check_owner(storage, stored, record.owner)
    resumed = stored.model_copy(update={"settings": record.settings})
    return resumed, load_entries(storage, run), True

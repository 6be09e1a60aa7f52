"""Hand-made runs in storage: run.json, manifest and committed (or half-written) attempts."""

from __future__ import annotations

from pathlib import Path

from gdpval.dataset.models import DatasetRef, Sample, Task
from gdpval.manifest import ManifestEntry, RunOwner, RunRecord, dump_manifest
from gdpval.sample import ErrorKind, SampleResult, SampleStatus, Usage
from gdpval.settings import RunSettings
from gdpval.storage import Storage, layout
from gdpval.storage.local import LocalStorage


def task(task_id: str, **fields: object) -> Task:
    values: dict[str, object] = {
        "sector": "Information",
        "occupation": "Editors",
        "prompt": f"Do task {task_id}.",
        "reference_files": [f"reference_files/{task_id}/input.txt"],
        "reference_file_urls": [f"https://example.test/{task_id}/input.txt"],
        "reference_file_hf_uris": [f"hf://datasets/openai/gdpval@main/reference_files/{task_id}/input.txt"],
    }
    return Task(task_id=task_id, **(values | fields))


def entries(tasks: list[Task], repeats: int = 1) -> list[ManifestEntry]:
    return [ManifestEntry(sample=Sample.of(t.task_id, r), task=t) for t in tasks for r in range(repeats)]


def record(run: str, repeats: int = 1, dataset: DatasetRef | None = None, model: str = "scripted") -> RunRecord:
    """A run record as prepare writes it: default settings but for the model and repeats."""
    dataset = dataset or DatasetRef(source="modelscope", location="openai-mirror/gdpval", revision="a" * 40)
    settings = RunSettings.model_validate({"model": {"name": model}, "selection": {"repeats": repeats}, "dataset": {"id": dataset.location}})
    return RunRecord(run_name=run, settings=settings, dataset=dataset)


def write_run(storage: Storage, run: str, items: list[ManifestEntry], repeats: int = 1, dataset: DatasetRef | None = None) -> RunRecord:
    written = record(run, repeats, dataset)
    storage.put_text(layout.run_json(run), written.dump())
    storage.put_text(layout.manifest(run), dump_manifest(items))
    return written


def succeeded(entry: ManifestEntry, attempt: int, files: dict[str, bytes], text: str = "done") -> SampleResult:
    return SampleResult(
        sample_id=entry.sample.sample_id,
        task_id=entry.sample.task_id,
        repeat=entry.sample.repeat,
        attempt=attempt,
        status=SampleStatus.succeeded,
        deliverable_text=text,
        deliverable_files=sorted(files),
        steps=3,
        usage=Usage(input_tokens=100, output_tokens=20),
        started_at=10.0,
        finished_at=12.5,
    )


def failed(entry: ManifestEntry, attempt: int, kind: ErrorKind = ErrorKind.max_steps) -> SampleResult:
    return SampleResult(
        sample_id=entry.sample.sample_id,
        task_id=entry.sample.task_id,
        repeat=entry.sample.repeat,
        attempt=attempt,
        status=SampleStatus.failed,
        error_kind=kind,
        error=f"stopped: {kind}",
        deliverable_text="partial answer",
        deliverable_files=["draft.txt"],
        steps=250,
        api_errors=2,
    )


def commit(
    storage: Storage,
    run: str,
    entry: ManifestEntry,
    attempt: int,
    result: SampleResult | None,
    files: dict[str, bytes] | None = None,
) -> None:
    """Upload deliverables, then result.json last; with `result=None` the attempt stays half-written."""
    sample = entry.sample.sample_id
    for rel, data in (files or {}).items():
        storage.put_bytes(f"{layout.deliverables(run, sample, attempt)}/{rel}", data)
    storage.put_text(layout.attempt_keys(run, sample, attempt).transcript, "{}\n")
    if result is not None:
        storage.put_text(layout.result(run, sample, attempt), result.model_dump_json())


def owned(root: Path, run: str, owner: RunOwner | None) -> tuple[LocalStorage, RunRecord]:
    """A prepared cluster run's folder in local storage at `root`: its run.json names `owner`."""
    storage = LocalStorage(root)
    made = record(run).model_copy(update={"owner": owner})
    storage.put_text(layout.manifest(run), "")
    storage.put_text(layout.run_json(run), made.dump())
    return storage, made

"""`gdpval check`: open every committed deliverable of a run in the renderer and write check.json.

Deterministic and model-free: each file is rendered as a judge would see it (cached by digest, so a
later judge pays nothing for it), and gdpval.submission.readiness decides each sample.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from gdpval.manifest import ManifestEntry
from gdpval.records import load_run
from gdpval.render import view_file
from gdpval.render.child import backend, renderer_label, text_only
from gdpval.render.view import View
from gdpval.sample import SampleResult
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.committed import CommittedAttempt, list_committed
from gdpval.submission.build import SubmissionError
from gdpval.submission.readiness import CheckResults, FileCheck, SampleCheck, sample_check, share

OnSample = Callable[[SampleCheck], None]
TEXT_ONLY = (
    "no LibreOffice to render with (no full runtime here; in a cluster Job, a sandbox image without it): files were opened as text, "
    "pages, sheets and slides not counted, fonts not checked; unpack the full runtime, or give the run the full sandbox image"
)


def check_run(storage: Storage, run: str, on_sample: OnSample | None = None) -> CheckResults:
    """Check every sample's committed deliverables; write and return runs/<run>/check.json."""
    _, entries = load_run(storage, run)
    attempts = list_committed(storage, run)
    system = backend(os.environ)
    checks = []
    for entry in entries:
        checks.append(check_sample(storage, run, entry, attempts.get(entry.sample.sample_id)))
        if on_sample is not None:
            on_sample(checks[-1])
    results = CheckResults(run_name=run, renderer=renderer_label(system), text_only=text_only(system), samples=checks, grading_ready=share(checks))
    storage.put_bytes(layout.check_results(run), results.model_dump_json(indent=2).encode())
    return results


def check_sample(storage: Storage, run: str, entry: ManifestEntry, committed: CommittedAttempt | None) -> SampleCheck:
    task, sample = entry.task, entry.sample.sample_id
    if committed is None:
        return sample_check(sample, task.task_id, None, task.prompt, task.reference_files, [])
    try:
        result = SampleResult.model_validate_json(storage.get_bytes(layout.result(run, sample, committed.attempt)))
        files = [f for f in result.deliverable_files if f in committed.present]
    except (NotFound, ValidationError):
        raise SubmissionError(f"sample {sample}: its committed result.json (attempt {committed.attempt}) is unreadable") from None
    root = layout.deliverables(run, sample, committed.attempt)
    with tempfile.TemporaryDirectory(prefix="gdpval-check-") as tmp:
        opened = [_open(storage, f"{root}/{rel}", Path(tmp) / f"{index}{PurePosixPath(rel).suffix[:16]}", rel) for index, rel in enumerate(files)]
    return sample_check(sample, task.task_id, committed.attempt, task.prompt, task.reference_files, opened)


def _open(storage: Storage, key: str, local: Path, name: str) -> FileCheck:
    storage.get_file(key, local)
    size = local.stat().st_size
    view = view_file(local, name) if size else View(name, "empty", "")
    local.unlink()
    return file_check(view, size)


def file_check(view: View, size: int) -> FileCheck:
    facts = view.facts
    return FileCheck(
        name=view.name,
        bytes=size,
        kind=view.kind,
        opens=not view.unrenderable,
        unrenderable=view.unrenderable,
        pages=facts.pages,
        sheets=facts.sheets,
        slides=facts.slides,
        fonts_missing=facts.fonts_missing,
    )

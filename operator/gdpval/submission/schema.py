"""Column layouts of the submission parquet and results.parquet, and pure row builders.

Rows are built field by field from named Task attributes, never by dumping a model, so gold
columns cannot reach a submission even if a Task ever carried extra fields.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pyarrow as pa

from gdpval.dataset.models import BASE_COLUMNS, RUBRIC_COLUMNS
from gdpval.manifest import ManifestEntry
from gdpval.sample import SampleResult
from gdpval.storage import layout

STRINGS = pa.list_(pa.field("element", pa.string()))

SUBMISSION_COLUMNS = (*BASE_COLUMNS, *RUBRIC_COLUMNS, "deliverable_text", "deliverable_files")
_LIST_COLUMNS = {"reference_files", "reference_file_urls", "reference_file_hf_uris", "deliverable_files"}

SUBMISSION_SCHEMA = pa.schema([pa.field(name, STRINGS if name in _LIST_COLUMNS else pa.string()) for name in SUBMISSION_COLUMNS])

RESULTS_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("repeat", pa.int64(), nullable=False),
        pa.field("attempt", pa.int64()),  # null: no committed attempt
        pa.field("status", pa.string(), nullable=False),  # succeeded | failed | missing
        pa.field("error_kind", pa.string()),
        pa.field("error", pa.string(), nullable=False),
        pa.field("steps", pa.int64(), nullable=False),
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        pa.field("cached_input_tokens", pa.int64(), nullable=False),
        pa.field("cost", pa.float64()),  # null: the run had no prices (budget.prices)
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("api_errors", pa.int64(), nullable=False),
        pa.field("rate_limited", pa.int64(), nullable=False),  # model calls answered with a rate limit (429, x-ratelimit-remaining-* at 0)
        pa.field("finish_reason", pa.string()),  # of the last model reply; null: no reply
        pa.field("unmetered_turns", pa.int64(), nullable=False),  # replies without (full) usage: tokens are a lower bound
        pa.field("deliverable_count", pa.int64(), nullable=False),
        pa.field("refused_count", pa.int64(), nullable=False),
        pa.field("submission_ready", pa.bool_(), nullable=False),  # final text or a deliverable file
        pa.field("completed", pa.bool_(), nullable=False),  # ended with a final answer
        pa.field("warnings", STRINGS, nullable=False),
    ]
)

MISSING = "missing"


class UnsafeDeliverable(ValueError):
    """A deliverable path that would leave its task's folder in the package."""


def deliverable_path(task_id: str, relative: str) -> str:
    """`deliverable_files/<task_id>/<relative>`, relative to the submission root."""
    parts = relative.split("/")
    if not relative or PurePosixPath(relative).is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise UnsafeDeliverable(f"deliverable path {relative!r} is not a plain relative path")
    if "/" in task_id or task_id in ("", ".", ".."):
        raise UnsafeDeliverable(f"task id {task_id!r} cannot name a folder")
    return layout.package_relpath(task_id, relative)


def ready(result: SampleResult | None) -> bool:
    return result is not None and result.ready


def submission_row(entry: ManifestEntry, result: SampleResult | None) -> dict[str, Any]:
    """One submission row: whatever a submission-ready result left (text, files), however it ended."""
    task = entry.task
    text = result.deliverable_text if result is not None else ""
    files = [deliverable_path(task.task_id, rel) for rel in result.deliverable_files] if result is not None else []
    return {
        "task_id": task.task_id,
        "sector": task.sector,
        "occupation": task.occupation,
        "prompt": task.prompt,
        "reference_files": list(task.reference_files),
        "reference_file_urls": list(task.reference_file_urls),
        "reference_file_hf_uris": list(task.reference_file_hf_uris),
        "rubric_pretty": task.rubric_pretty,
        "rubric_json": task.rubric_json,
        "deliverable_text": text,
        "deliverable_files": files,
    }


def result_row(entry: ManifestEntry, result: SampleResult | None) -> dict[str, Any]:
    """One results.parquet row; a sample without a committed attempt has status `missing`."""
    sample = entry.sample
    if result is None:
        return {
            "sample_id": sample.sample_id,
            "task_id": sample.task_id,
            "repeat": sample.repeat,
            "attempt": None,
            "status": MISSING,
            "error_kind": None,
            "error": "no committed attempt",
            "steps": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cached_input_tokens": 0,
            "cost": None,
            "duration_s": 0.0,
            "api_errors": 0,
            "rate_limited": 0,
            "finish_reason": None,
            "unmetered_turns": 0,
            "deliverable_count": 0,
            "refused_count": 0,
            "submission_ready": False,
            "completed": False,
            "warnings": [],
        }
    return {
        "sample_id": sample.sample_id,
        "task_id": sample.task_id,
        "repeat": sample.repeat,
        "attempt": result.attempt,
        "status": str(result.status),
        "error_kind": str(result.error_kind) if result.error_kind else None,
        "error": result.error,
        "steps": result.steps,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cached_input_tokens": result.usage.cached_input_tokens,
        "cost": result.cost,
        "duration_s": result.duration_s,
        "api_errors": result.api_errors,
        "rate_limited": result.rate_limited,
        "finish_reason": result.finish_reason,
        "unmetered_turns": result.unmetered_turns,
        "deliverable_count": len(result.deliverable_files),
        "refused_count": len(result.refused_files),
        "submission_ready": result.ready,
        "completed": result.completed,
        "warnings": list(result.warnings),
    }


def submission_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SUBMISSION_SCHEMA)


def results_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=RESULTS_SCHEMA)

"""Parquet rows into Task models, for both dataset revisions.

Only the named Task columns become tasks, so the gold never enters task data; `read_gold` reads the
gold column alone, for the judge.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gdpval.dataset.errors import DatasetError
from gdpval.dataset.models import BASE_COLUMNS, GOLD_COLUMNS, RUBRIC_COLUMNS, Task
from gdpval.dataset.references import gold_path, reference_path

LIST_COLUMNS = ("reference_files", "reference_file_urls", "reference_file_hf_uris")
TEXT_COLUMNS = ("task_id", "sector", "occupation", "prompt")


def split_files(names: Iterable[str], split: str) -> list[str]:
    """The `data/` parquet files of one split, by the Hugging Face naming conventions, sorted."""
    pattern = re.compile(rf"^data/(?:{re.escape(split)}(?:[-_.][^/]*)?\.parquet|{re.escape(split)}/[^/]+\.parquet)$")
    return sorted(name for name in names if pattern.match(name))


def content_revision(blobs: Iterable[tuple[str, bytes]]) -> str:
    """A short, stable hash of named file contents: the pinned revision of a folder or prefix."""
    digest = hashlib.sha256()
    for name, data in sorted(blobs):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:12]


def read_tasks(name: str, data: bytes) -> list[Task]:
    """Tasks of one parquet file; `name` only serves error messages."""
    return tasks_from_table(_table(name, data), name)


Gold = dict[str, list[str]]


def read_gold(name: str, data: bytes) -> Gold | None:
    """Each task's gold deliverable paths, or None for a revision without the gold column."""
    table = _table(name, data)
    column = GOLD_COLUMNS[0]
    if column not in table.column_names:
        return None
    gold: Gold = {}
    for index, row in enumerate(table.select(["task_id", column]).to_pylist()):
        paths = _strings(row[column], column, f"{name} row {index}")
        for path in paths:
            try:
                gold_path(path)
            except DatasetError as exc:
                raise DatasetError(f"{name} row {index}: {exc}") from None
        gold[str(row["task_id"])] = paths
    return gold


def _table(name: str, data: bytes) -> pa.Table:
    try:
        return pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{name} is not a readable parquet file ({exc}): re-download the dataset") from None


def tasks_from_table(table: pa.Table, name: str) -> list[Task]:
    """Validate the columns, then build one Task per row (rubric columns optional)."""
    missing = [col for col in BASE_COLUMNS if col not in table.column_names]
    if missing:
        raise DatasetError(f"{name} lacks the column(s) {', '.join(missing)}: a GDPval parquet needs {', '.join(BASE_COLUMNS)}")
    wanted = [col for col in (*BASE_COLUMNS, *RUBRIC_COLUMNS) if col in table.column_names]
    try:
        rows = table.select(wanted).to_pylist()
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{name} holds text that is not UTF-8 ({exc.reason} at byte {exc.start}): re-download the dataset") from None
    return [_task(row, name, index) for index, row in enumerate(rows)]


def _task(row: dict[str, Any], name: str, index: int) -> Task:
    where = f"{name} row {index}"
    values: dict[str, Any] = {col: _text(row.get(col), col, where, required=True) for col in TEXT_COLUMNS}
    values |= {col: _strings(row.get(col), col, where) for col in LIST_COLUMNS}
    for path in values["reference_files"]:
        try:
            reference_path(path)
        except DatasetError as exc:
            raise DatasetError(f"{where}: {exc}") from None
    values["rubric_pretty"] = _text(row.get("rubric_pretty"), "rubric_pretty", where, required=False)
    values["rubric_json"] = _rubric_json(row.get("rubric_json"))
    return Task(**values)


def _text(value: Any, col: str, where: str, *, required: bool) -> str:
    if value is None:
        if required:
            raise DatasetError(f"{where}: column {col} is empty; every task needs {', '.join(TEXT_COLUMNS)}")
        return ""
    if not isinstance(value, str):
        raise DatasetError(f"{where}: column {col} holds {type(value).__name__}, expected text")
    if required and col == "task_id" and not value.strip():
        raise DatasetError(f"{where}: task_id is blank")
    return value


def _strings(value: Any, col: str, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DatasetError(f"{where}: column {col} must be a list of strings")
    return value


def _rubric_json(value: Any) -> str:
    """The current revision stores a JSON string; a structured column is serialised the same way."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def check_unique(tasks: list[Task], origin: str) -> list[Task]:
    """Duplicate task ids would give two samples one id; refuse them."""
    counts = Counter(task.task_id for task in tasks)
    dupes = sorted(task_id for task_id, n in counts.items() if n > 1)
    if dupes:
        raise DatasetError(f"{origin} has duplicate task ids: {', '.join(dupes[:5])}")
    return tasks

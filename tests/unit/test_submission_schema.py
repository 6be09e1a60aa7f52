"""Submission and results rows: exact columns and types, no gold, failed samples kept empty."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gdpval.dataset.models import Task
from gdpval.sample import ErrorKind, RefusedFile
from gdpval.submission.schema import (
    RESULTS_SCHEMA,
    SUBMISSION_COLUMNS,
    SUBMISSION_SCHEMA,
    UnsafeDeliverable,
    deliverable_path,
    result_row,
    results_table,
    submission_row,
    submission_table,
)
from support import runs
from support.cli import SUBMISSION_COLUMNS as SUBMISSION_COLUMNS_EXPECTED

EXPECTED = SUBMISSION_COLUMNS_EXPECTED
LISTS = {"reference_files", "reference_file_urls", "reference_file_hf_uris", "deliverable_files"}


def roundtrip(table: pa.Table) -> pa.Table:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return pq.read_table(io.BytesIO(buffer.getvalue()))


def test_columns_are_the_official_eleven_in_order_with_exact_types():
    assert list(SUBMISSION_COLUMNS) == EXPECTED == SUBMISSION_SCHEMA.names
    for field in SUBMISSION_SCHEMA:
        expected = pa.list_(pa.field("element", pa.string())) if field.name in LISTS else pa.string()
        assert field.type == expected, field.name
    read = roundtrip(submission_table([]))
    assert read.column_names == EXPECTED
    assert str(read.schema.field("deliverable_files").type) == "list<element: string>"
    assert str(read.schema.field("rubric_json").type) == "string"


def test_succeeded_row_carries_text_and_package_paths():
    entry = runs.entries([runs.task("t1", rubric_pretty="R", rubric_json='[{"score": 1}]')])[0]
    row = submission_row(entry, runs.succeeded(entry, 1, {"report.docx": b"x", "charts/a b.png": b"y"}))
    assert list(row) == EXPECTED
    assert row["deliverable_text"] == "done"
    assert row["deliverable_files"] == ["deliverable_files/t1/charts/a b.png", "deliverable_files/t1/report.docx"]
    assert row["rubric_json"] == '[{"score": 1}]' and row["rubric_pretty"] == "R"
    assert row["reference_files"] == ["reference_files/t1/input.txt"]


def test_a_missing_sample_keeps_its_row_with_nothing_delivered():
    entry = runs.entries([runs.task("t1")])[0]
    row = submission_row(entry, None)
    assert row["task_id"] == "t1" and row["prompt"] == "Do task t1."
    assert row["deliverable_text"] == "" and row["deliverable_files"] == []


def test_a_failed_sample_delivers_what_it_left():
    """The benchmark grades what the model produced, however the attempt ended."""
    entry = runs.entries([runs.task("t1")])[0]
    failed = runs.failed(entry, 2)
    row = submission_row(entry, failed)
    assert row["deliverable_text"] == "partial answer" and row["deliverable_files"] == ["deliverable_files/t1/draft.txt"]
    assert failed.ready and not failed.completed
    empty = failed.model_copy(update={"deliverable_text": " \n", "deliverable_files": []})
    assert not empty.ready and submission_row(entry, empty)["deliverable_files"] == []


def test_gold_never_leaks_even_if_a_task_carried_extra_fields():
    class LeakyTask(Task):
        deliverable_files: list[str] = ["gold/answer.xlsx"]
        deliverable_file_urls: list[str] = ["https://gold"]
        deliverable_file_hf_uris: list[str] = ["hf://gold"]

    leaky = LeakyTask(**runs.task("t1").model_dump())
    entry = runs.entries([runs.task("t1")])[0].model_copy(update={"task": leaky})
    row = submission_row(entry, None)
    assert set(row) == set(EXPECTED)
    assert row["deliverable_files"] == []
    flat = repr(submission_table([row]).to_pylist())
    assert "gold" not in flat
    assert {"deliverable_file_urls", "deliverable_file_hf_uris"}.isdisjoint(row)


def test_unicode_survives_the_parquet_roundtrip():
    prompt = "Prüfe die Bilanz – 报告 – ½ ✓"
    entry = runs.entries([runs.task("t1", prompt=prompt, sector="Santé & Soins")])[0]
    result = runs.succeeded(entry, 1, {"résumé €.txt": b"x"}, text="Fertig ✓")
    read = roundtrip(submission_table([submission_row(entry, result)])).to_pylist()[0]
    assert read["prompt"] == prompt and read["sector"] == "Santé & Soins"
    assert read["deliverable_text"] == "Fertig ✓"
    assert read["deliverable_files"] == ["deliverable_files/t1/résumé €.txt"]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a//b", "./a", ""])
def test_deliverable_paths_never_leave_the_task_folder(bad):
    with pytest.raises(UnsafeDeliverable):
        deliverable_path("t1", bad)


def test_result_rows_for_each_outcome():
    entry = runs.entries([runs.task("t1")])[0]
    ok = runs.succeeded(entry, 2, {"a.txt": b"1", "b.txt": b"2"}).model_copy(update={"finish_reason": "stop", "unmetered_turns": 1, "rate_limited": 4})
    bad = runs.failed(entry, 1, ErrorKind.rate_limited).model_copy(update={"refused_files": [RefusedFile(path="link", reason="symlink")]})
    rows = [result_row(entry, ok), result_row(entry, bad), result_row(entry, None)]
    table = roundtrip(results_table(rows))
    assert table.schema.equals(RESULTS_SCHEMA)
    got = table.to_pylist()
    assert got[0] | {"duration_s": 0} == {
        "sample_id": "t1-r0",
        "task_id": "t1",
        "repeat": 0,
        "attempt": 2,
        "status": "succeeded",
        "error_kind": None,
        "error": "",
        "steps": 3,
        "input_tokens": 100,
        "output_tokens": 20,
        "cached_input_tokens": 0,
        "cost": None,
        "duration_s": 0,
        "api_errors": 0,
        "rate_limited": 4,
        "finish_reason": "stop",
        "unmetered_turns": 1,
        "deliverable_count": 2,
        "refused_count": 0,
        "submission_ready": True,
        "completed": True,
        "warnings": [],
    }
    assert got[0]["duration_s"] == pytest.approx(2.5)
    assert (got[1]["status"], got[1]["error_kind"], got[1]["refused_count"], got[1]["api_errors"]) == (
        "failed",
        "rate_limited",
        1,
        2,
    )
    assert (got[2]["status"], got[2]["attempt"], got[2]["error"], got[2]["rate_limited"]) == ("missing", None, "no committed attempt", 0)
    assert (got[1]["submission_ready"], got[1]["completed"], got[2]["submission_ready"]) == (True, False, False)

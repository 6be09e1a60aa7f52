"""The stress dataset has the real GDPval's shape, in both revisions, and the project reads it."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gdpval.dataset.local_source import LocalFolder
from gdpval.dataset.models import GOLD_COLUMNS
from gdpval.dataset.parquet import read_tasks
from support import stress


@pytest.fixture(scope="module", params=["first", "current"])
def dataset(request, tmp_path_factory) -> tuple[str, Path]:
    return request.param, stress.make_stress_dataset(tmp_path_factory.mktemp(request.param), request.param)


def rows_of(root: Path) -> list[dict]:
    return pq.read_table(root / stress.PARQUET).to_pylist()


def test_columns_of_each_revision(dataset):
    revision, root = dataset
    table = pq.read_table(root / stress.PARQUET)
    if revision == "first":
        assert table.column_names == list(stress.FIRST_COLUMNS) and len(table.column_names) == 7
    else:
        assert table.column_names == list(stress.CURRENT_COLUMNS) and len(table.column_names) == 13
        assert set(GOLD_COLUMNS) < set(table.column_names)
    for column in ("reference_files", "reference_file_urls", "reference_file_hf_uris"):
        assert str(table.schema.field(column).type) == "list<element: string>"
    assert json.loads(table.schema.metadata[b"huggingface"])["info"]["features"].keys() == set(table.column_names)


def test_tasks_sectors_and_occupations(dataset):
    rows = rows_of(dataset[1])
    assert len(rows) == 220 and len({r["task_id"] for r in rows}) == 220
    sectors = Counter(r["sector"] for r in rows)
    occupations = Counter((r["sector"], r["occupation"]) for r in rows)
    assert len(sectors) == 9 and len(occupations) == 44
    assert set(occupations.values()) == {5}
    assert sorted(Counter(s for s, _ in occupations).values()) == [4] + [5] * 8


def test_prompt_lengths_and_text(dataset):
    prompts = [r["prompt"] for r in rows_of(dataset[1])]
    lengths = [len(p) for p in prompts]
    assert (min(lengths), max(lengths)) == (1058, 7160)
    assert abs(statistics.mean(lengths) - 2740) < 5
    assert statistics.median(lengths) < statistics.mean(lengths)  # a long tail, as in the real prompts
    with_separators = [p for p in prompts if "\u2028" in p and "\u2029" in p]
    assert 40 <= len(with_separators) <= 80
    text = "".join(prompts)
    for mark in ("’", "“", "—", "…", "€", "\u00a0", "\t", "\r\n", "é", "📈"):
        assert mark in text, mark


def test_reference_files(dataset):
    revision, root = dataset
    rows = rows_of(root)
    counts = [len(r["reference_files"]) for r in rows]
    assert sum(counts) == 262 and sum(1 for c in counts if c) == 122
    assert max(counts) == 17 and sum(1 for c in counts if c >= 10) >= 3
    named = {path for r in rows for path in r["reference_files"]}
    made = {p.relative_to(root).as_posix() for p in (root / "reference_files").rglob("*") if p.is_file()}
    assert made == named and len(named) == 262
    names = [path.split("/", 2)[2] for path in named]
    for mark in (" ", "(", "&", "#", "%", "é"):
        assert any(mark in name for name in names), mark
    assert max(len(name) for name in names) > 150
    assert max(len(name.encode()) for name in names) < 255
    assert len({name.rsplit(".", 1)[1].lower() for name in names}) == 14
    for row in rows:
        assert [u.rsplit("/resolve/main/", 1)[1] for u in row["reference_file_urls"]] == row["reference_files"]
        assert [u.split("@main/", 1)[1] for u in row["reference_file_hf_uris"]] == row["reference_files"]


def test_current_revision_gold_and_rubric(dataset):
    revision, root = dataset
    if revision == "first":
        assert "rubric_json" not in pq.read_table(root / stress.PARQUET).column_names
        return
    for row in rows_of(root):
        items = json.loads(row["rubric_json"])
        assert items and {tuple(sorted(i)) for i in items} == {
            tuple(sorted(["score", "criterion", "required", "rubric_item_id", "author_type", "tags", "read_only", "form_content"]))
        }
        assert all(f"[{i['score']} pts] {i['criterion']}" in row["rubric_pretty"] for i in items)
        assert stress.GOLD_MARK in row["deliverable_text"] and len(row["deliverable_files"]) == 1


def test_revisions_share_tasks_but_not_hash_folders():
    first, current = stress.stress_rows("first"), stress.stress_rows("current")
    assert [(r["task_id"], r["prompt"]) for r in first] == [(r["task_id"], r["prompt"]) for r in current]
    folders = lambda rows: {p.split("/")[1] for r in rows for p in r["reference_files"]}  # noqa: E731
    assert not folders(first) & folders(current)
    assert stress.stress_rows("current") == current  # seeded: the same every time
    assert stress.stress_rows("current", seed=1) != current


def test_the_project_reads_it(dataset):
    revision, root = dataset
    [(name, data)] = LocalFolder(root).parquet_blobs("train")
    tasks = read_tasks(name, data)
    rows = rows_of(root)
    assert [t.prompt for t in tasks] == [r["prompt"] for r in rows]
    assert [t.reference_files for t in tasks] == [r["reference_files"] for r in rows]
    assert all(bool(t.rubric_json) == (revision == "current") for t in tasks)


def test_a_covering_selection_holds_every_awkward_case_in_dataset_order():
    rows = stress.stress_rows()
    chosen = stress.covering_tasks(rows, 40)
    picked = [row for row in rows if row["task_id"] in set(chosen)]
    assert len(chosen) == 40 and chosen == [row["task_id"] for row in picked]
    missing = [case for case, awkward in stress.AWKWARD.items() if not any(awkward(row) for row in picked)]
    assert not missing
    assert any(not any(awkward(row) for row in rows[:40]) for awkward in stress.AWKWARD.values()), "the first 40 alone would do"
    assert stress.covering_tasks(rows, 5) == stress.covering_tasks(rows, 1) and len(stress.covering_tasks(rows, 220)) == 220

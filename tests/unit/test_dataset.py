"""Dataset loading from a local folder: both revisions, gold dropped, errors that say what to fix."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gdpval.dataset.errors import DatasetError, MissingReference
from gdpval.dataset.loader import load_dataset, source_kind
from gdpval.dataset.parquet import split_files
from gdpval.dataset.references import Absent, FileCache

PARQUET = "data/train-00000-of-00001.parquet"
GOLD = "GOLD-ANSWER"


@pytest.fixture(scope="module")
def sample_table(sample_dataset) -> pa.Table:
    return pq.read_table(sample_dataset / PARQUET)


def write_dataset(root: Path, table: pa.Table, name: str = PARQUET) -> Path:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / name)
    return root


def current_revision(table: pa.Table) -> pa.Table:
    """The 13-column layout: rubric columns plus gold answers."""
    n = table.num_rows
    rubric = [f'[{{"score": {i}, "criterion": "Kriterium ✓ {i}", "required": true}}]' for i in range(n)]
    gold = pa.array([[f"deliverable_files/{GOLD}/{i}.xlsx"] for i in range(n)], pa.list_(pa.string()))
    return (
        table.append_column("deliverable_files", gold)
        .append_column("deliverable_file_urls", gold)
        .append_column("deliverable_file_hf_uris", gold)
        .append_column("rubric_pretty", pa.array([f"Rubric {i}" for i in range(n)]))
        .append_column("rubric_json", pa.array(rubric))
    )


def load(root: Path, tmp_path: Path, revision: str | None = None):
    return load_dataset(str(root), revision=revision, cache_dir=tmp_path / "cache")


def test_first_revision_loads_twelve_tasks_without_rubric(tmp_path, sample_table, sample_dataset):
    data = load(sample_dataset, tmp_path)
    assert len(data.tasks) == 12
    assert data.ref.source == "local" and Path(data.ref.location).resolve() == sample_dataset.resolve()
    assert len(data.ref.revision) == 12
    assert [t.task_id for t in data.tasks] == sample_table.column("task_id").to_pylist()
    assert all(t.rubric_pretty == "" and t.rubric_json == "" for t in data.tasks)
    assert sum(len(t.reference_files) for t in data.tasks) == 50
    assert any(not t.prompt.isascii() for t in data.tasks)


def test_current_revision_loads_rubric_and_drops_gold(tmp_path, sample_table):
    root = write_dataset(tmp_path / "v2", current_revision(sample_table))
    data = load(root, tmp_path)
    assert len(data.tasks) == 12
    assert data.tasks[3].rubric_pretty == "Rubric 3"
    assert "Kriterium ✓ 3" in data.tasks[3].rubric_json
    for task in data.tasks:
        assert GOLD not in task.model_dump_json()
        assert "deliverable_file_urls" not in task.model_dump()


def test_revision_is_a_content_hash_that_pins_the_folder(tmp_path, sample_table):
    root = write_dataset(tmp_path / "d", sample_table)
    first = load(root, tmp_path)
    assert load(root, tmp_path, revision=first.ref.revision).ref == first.ref
    write_dataset(root, sample_table.slice(0, 5))
    with pytest.raises(DatasetError, match=f"not {first.ref.revision}.*changed"):
        load(root, tmp_path, revision=first.ref.revision)


@pytest.mark.parametrize(
    "source, kind",
    [
        ("openai-mirror/gdpval", "modelscope"),
        ("s3://bucket/prefix", "s3"),
        ("./data", "local"),
        ("../data", "local"),
        ("~/data", "local"),
        ("/abs/data", "local"),
        (".", "local"),
    ],
)
def test_source_kind(source, kind):
    assert source_kind(source) == kind


def test_existing_relative_path_is_local_even_if_it_looks_like_an_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "name").mkdir(parents=True)
    assert source_kind("owner/name") == "local"


@pytest.mark.parametrize("source", ["http://example.com/x", "not an id", "a/b/c"])
def test_unrecognised_sources_are_refused(source):
    with pytest.raises(DatasetError, match="use a folder|neither"):
        source_kind(source)


def test_missing_folder_says_it_does_not_exist(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset folder .*nowhere does not exist"):
        load(tmp_path / "nowhere", tmp_path)


def test_folder_without_the_split_lists_what_it_found(tmp_path, sample_table):
    root = write_dataset(tmp_path / "d", sample_table, "data/test-00000-of-00001.parquet")
    with pytest.raises(DatasetError, match=r"no parquet file for split 'train'.*data/test-00000-of-00001\.parquet"):
        load(root, tmp_path)


def test_bad_parquet_is_named(tmp_path):
    (tmp_path / "d" / "data").mkdir(parents=True)
    (tmp_path / "d" / PARQUET).write_bytes(b"this is not parquet")
    with pytest.raises(DatasetError, match="not a readable parquet file"):
        load(tmp_path / "d", tmp_path)


def test_missing_columns_are_listed(tmp_path, sample_table):
    root = write_dataset(tmp_path / "d", sample_table.drop_columns(["prompt", "sector"]))
    with pytest.raises(DatasetError, match="lacks the column\\(s\\) sector, prompt"):
        load(root, tmp_path)


def test_empty_task_id_and_wrong_types_are_refused(tmp_path, sample_table):
    table = sample_table
    ids = table.column("task_id").to_pylist()
    nulls = table.set_column(0, "task_id", pa.array([None, *ids[1:]], pa.string()))
    with pytest.raises(DatasetError, match="row 0: column task_id is empty"):
        load(write_dataset(tmp_path / "a", nulls), tmp_path)
    numbers = table.set_column(2, "occupation", pa.array(range(12)))
    with pytest.raises(DatasetError, match="column occupation holds int"):
        load(write_dataset(tmp_path / "b", numbers), tmp_path)


def test_duplicate_task_ids_are_refused(tmp_path, sample_table):
    table = sample_table
    doubled = pa.concat_tables([table, table.slice(0, 1)])
    with pytest.raises(DatasetError, match="duplicate task ids: 83d10b06"):
        load(write_dataset(tmp_path / "d", doubled), tmp_path)


def test_split_file_naming():
    names = [
        "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet",
        "data/train.parquet",
        "data/train/part-0.parquet",
        "data/training-0.parquet",
        "data/test-0.parquet",
        "train.parquet",
    ]
    assert split_files(names, "train") == sorted(names[:4])


def test_local_references_are_used_in_place(tmp_path, sample_table):
    root = write_dataset(tmp_path / "d", sample_table)
    data = load(root, tmp_path)
    path = data.tasks[0].reference_files[0]
    (root / path).parent.mkdir(parents=True)
    (root / path).write_bytes(b"xlsx")
    assert data.fetch_reference(path) == (root / path).resolve()
    assert not (tmp_path / "cache").exists()


def test_missing_reference_names_the_task_and_path(tmp_path, sample_dataset):
    data = load(sample_dataset, tmp_path)
    task = data.tasks[1]
    with pytest.raises(MissingReference) as caught:
        data.fetch_reference(task.reference_files[2])
    assert caught.value.task_ids == [task.task_id] and caught.value.path == task.reference_files[2]
    assert task.task_id in str(caught.value) and "MORTGAGE INTEREST FORM.pdf" in str(caught.value)


@pytest.mark.parametrize("bad", ["../secret", "reference_files/../../etc/passwd", "data/train.parquet", "/etc/passwd", "reference_files/only-hash"])
def test_reference_paths_must_be_reference_files(bad, tmp_path, sample_dataset):
    with pytest.raises(DatasetError):
        load(sample_dataset, tmp_path).fetch_reference(bad)


def test_file_cache_fetches_once_under_concurrency(tmp_path):
    calls: list[str] = []

    def download(path: str, dest: Path) -> None:
        calls.append(path)
        time.sleep(0.05)
        dest.write_bytes(path.encode())

    cache = FileCache(tmp_path, download)
    results: list[Path] = []

    def fetch() -> None:
        results.append(cache.get("reference_files/h/a b.pdf"))

    threads = [threading.Thread(target=fetch) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == ["reference_files/h/a b.pdf"]
    assert {p.read_bytes() for p in results} == {b"reference_files/h/a b.pdf"}


def test_file_cache_never_leaves_a_partial_file(tmp_path):
    def broken(path: str, dest: Path) -> None:
        dest.write_bytes(b"half")
        raise OSError("connection reset")

    def absent(path: str, dest: Path) -> None:
        raise Absent(path)

    with pytest.raises(OSError):
        FileCache(tmp_path, broken).get("reference_files/h/x.pdf")
    with pytest.raises(Absent):
        FileCache(tmp_path, absent).get("reference_files/h/x.pdf")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_rows_naming_unsafe_reference_paths_are_refused_at_load(tmp_path, sample_table):
    table = sample_table
    refs = table.column("reference_files").to_pylist()
    refs[0] = ["reference_files/../../etc/passwd"]
    bad = table.set_column(4, "reference_files", pa.array(refs, pa.list_(pa.string())))
    with pytest.raises(DatasetError, match="row 0: .*not a plain relative path"):
        load(write_dataset(tmp_path / "d", bad), tmp_path)


def test_the_gold_is_read_for_the_judge_alone_and_absent_from_a_7_column_revision(tmp_path, sample_table):
    current = load(write_dataset(tmp_path / "current", current_revision(sample_table)), tmp_path)
    assert current.gold is not None and current.gold[current.tasks[2].task_id] == [f"deliverable_files/{GOLD}/2.xlsx"]
    assert all(GOLD not in task.model_dump_json() for task in current.tasks)
    assert load(write_dataset(tmp_path / "first", sample_table), tmp_path).gold is None
    bad = current_revision(sample_table).set_column(7, "deliverable_files", pa.array([["../x.xlsx"]] * sample_table.num_rows, pa.list_(pa.string())))
    with pytest.raises(DatasetError, match="row 0: dataset path .* is not a plain relative path"):
        load(write_dataset(tmp_path / "bad", bad), tmp_path)

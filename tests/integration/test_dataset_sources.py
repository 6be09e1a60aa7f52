"""The remote dataset sources end to end: an s3:// prefix on MinIO and the ModelScope code path.

The ModelScope tests drive the real `modelscope` download code against `support.modelscope_hub`,
a local stand-in that serves, under /api/v1: `datasets/<owner>/<name>` (repository info),
`datasets/<id>/repo/tree` (paged file listing with commit ids), `datasets/<owner>/<name>/repo`
(file bytes) and a 404 for `repos/internalAccelerationInfo`. MODELSCOPE_ENDPOINT points at it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gdpval.dataset.errors import DatasetError, MissingReference
from gdpval.dataset.loader import load_dataset
from gdpval.dataset.modelscope_source import ModelScopeRepo
from gdpval.storage.s3 import S3Storage
from support.modelscope_hub import StandinHub
from support.standins import make_standin_dataset

MISSING = "reference_files/9633ae95869c5e80584dfc63d719714e/PM Duties (1).pdf"


@pytest.fixture(scope="module")
def standins(sample_dataset, tmp_path_factory) -> Path:
    """The sample with stand-in references, minus one file so a missing reference can be seen."""
    root = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("standins"))
    (root / MISSING).unlink()
    return root


def all_references(data) -> list[str]:
    return [path for task in data.tasks for path in task.reference_files if path != MISSING]


@pytest.fixture
def bucket_uri(s3, s3_env, standins) -> str:
    storage = S3Storage(s3.make_bucket(), "mirror/gdpval")
    for path in sorted(standins.rglob("*")):
        if path.is_file():
            storage.put_file(path.relative_to(standins).as_posix(), path)
    return storage.uri


@pytest.mark.s3
def test_s3_prefix_loads_like_the_local_folder(bucket_uri, standins, tmp_path):
    data = load_dataset(bucket_uri, revision=None, cache_dir=tmp_path)
    local = load_dataset(str(standins), revision=None, cache_dir=tmp_path / "unused")
    assert (data.ref.source, data.ref.location) == ("s3", bucket_uri)
    assert data.ref.revision == local.ref.revision and data.tasks == local.tasks
    for path in all_references(data):
        fetched = data.fetch_reference(path)
        assert fetched == tmp_path / data.ref.key / path
        assert fetched.read_bytes() == (standins / path).read_bytes()
    with pytest.raises(MissingReference, match="PM Duties"):
        data.fetch_reference(MISSING)


@pytest.mark.s3
def test_s3_references_are_fetched_once_per_revision(bucket_uri, s3_env, tmp_path):
    data = load_dataset(bucket_uri, revision=None, cache_dir=tmp_path)
    path = all_references(data)[0]
    first = data.fetch_reference(path)
    storage = S3Storage.from_uri(bucket_uri)
    storage.client.delete_object(Bucket=storage.bucket, Key=f"{storage.prefix}/{path}")
    again = load_dataset(bucket_uri, revision=data.ref.revision, cache_dir=tmp_path)
    assert again.fetch_reference(path) == first and first.is_file()


@pytest.mark.s3
def test_s3_errors_say_what_to_fix(s3, s3_env, tmp_path):
    with pytest.raises(DatasetError, match="bucket 'no-such-bucket' does not exist"):
        load_dataset("s3://no-such-bucket/x", revision=None, cache_dir=tmp_path)
    empty = f"s3://{s3.make_bucket()}/nothing"
    with pytest.raises(DatasetError, match="no parquet file for split 'train'"):
        load_dataset(empty, revision=None, cache_dir=tmp_path)


@pytest.fixture
def hub(standins, monkeypatch):
    with StandinHub(standins) as server:
        monkeypatch.setenv("MODELSCOPE_ENDPOINT", server.endpoint)
        yield server


def test_modelscope_loads_pins_the_commit_and_caches(hub, standins, tmp_path):
    data = load_dataset("openai-mirror/gdpval", revision=None, cache_dir=tmp_path)
    assert (data.ref.source, data.ref.location, data.ref.revision) == ("modelscope", "openai-mirror/gdpval", hub.commit)
    assert len(data.tasks) == 12
    paths = all_references(data)
    for path in paths:
        assert data.fetch_reference(path).read_bytes() == (standins / path).read_bytes()
    assert data.fetch_reference(paths[0]) == tmp_path / data.ref.key / paths[0]
    resumed = load_dataset("openai-mirror/gdpval", revision=data.ref.revision, cache_dir=tmp_path)
    assert resumed.ref == data.ref and resumed.fetch_reference(paths[0]).is_file()
    assert hub.downloads("data/train-00000-of-00001.parquet") == 1
    assert {hub.downloads(path) for path in paths} == {1}
    downloads = [q for p, q in hub.requests if p.endswith("/repo")]
    assert {q["Revision"] for q in downloads} == {hub.commit}


def test_modelscope_missing_reference_is_per_sample(hub, tmp_path):
    data = load_dataset("openai-mirror/gdpval", revision=None, cache_dir=tmp_path)
    with pytest.raises(MissingReference) as caught:
        data.fetch_reference(MISSING)
    assert caught.value.task_ids == ["1e5a1d7f-12c1-48c6-afd9-82257b3f2409"]
    assert hub.downloads(MISSING) == 0


def test_modelscope_unknown_id_and_revision(hub, tmp_path):
    with pytest.raises(DatasetError, match="'nobody/nothing' at http://127.0.0.1:\\d+ not found: check the dataset id"):
        load_dataset("nobody/nothing", revision=None, cache_dir=tmp_path)
    with pytest.raises(DatasetError, match="has no revision 'v9': check --revision"):
        load_dataset("openai-mirror/gdpval", revision="v9", cache_dir=tmp_path)


def test_modelscope_unreachable_hub(tmp_path):
    with pytest.raises(DatasetError, match="the hub is unreachable; check the network or MODELSCOPE_ENDPOINT"):
        ModelScopeRepo("openai-mirror/gdpval", None, endpoint="http://127.0.0.1:9", max_retries=0)

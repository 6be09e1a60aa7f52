"""Storage steps on a real MinIO: the submission built on S3 matches the one built on a local folder,
and staging fetches every reference from S3 read-only."""

from __future__ import annotations

import pytest

from gdpval.manifest import ReferenceFile
from gdpval.runner.pod import STAGE_CONCURRENCY, stage
from gdpval.runner.prepare import save_or_resume
from gdpval.storage import NotFound
from gdpval.storage.local import LocalStorage
from gdpval.storage.s3 import S3Storage
from gdpval.submission.build import build_submission
from support import runs
from support.submission import RUN, SUB, check_single_package, make_run

pytestmark = pytest.mark.s3


def test_build_on_s3_writes_the_same_objects(s3, s3_env, tmp_path):
    storage = S3Storage(s3.make_bucket(), "gdpval")
    make_run(storage)
    check_single_package(storage)
    local = LocalStorage(tmp_path)
    make_run(local)
    build_submission(local, RUN)
    assert sorted(storage.list(SUB)) == sorted(local.list(SUB))
    for key in local.list(SUB):
        if not key.endswith(".json"):
            assert storage.get_bytes(key) == local.get_bytes(key), key


def test_stage_from_s3_fetches_every_reference_read_only_and_leaves_nothing_of_a_missing_one(s3, s3_env, tmp_path):
    storage = S3Storage(s3.make_bucket(), "gdpval")
    names = [f"ref-{i}-\u00e9\u4e2d.txt" for i in range(2 * STAGE_CONCURRENCY + 1)]  # more files than downloads in flight
    refs = []
    for i, name in enumerate(names):
        key = f"datasets/d/reference_files/h{i}/{name}"
        storage.put_bytes(key, name.encode() * (i * 50_000 + 1))  # up to a few chunks of the stream
        refs.append(ReferenceFile(path=f"reference_files/h{i}/{name}", key=key))
    (entry,) = runs.entries([runs.task("t1")])
    save_or_resume(storage, runs.record(RUN), [entry.model_copy(update={"references": refs})])
    staged = stage(storage, RUN, entry.sample.sample_id, tmp_path / "refs")
    assert [p.relative_to(tmp_path / "refs").as_posix() for p in staged] == [f"h{i}/{name}" for i, name in enumerate(names)]
    assert all(p.read_bytes() == p.name.encode() * (i * 50_000 + 1) and not p.stat().st_mode & 0o222 for i, p in enumerate(staged))
    with pytest.raises(NotFound):
        storage.get_file("datasets/d/reference_files/gone.txt", tmp_path / "gone" / "gone.txt")
    assert list((tmp_path / "gone").iterdir()) == []

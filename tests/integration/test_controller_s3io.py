"""What the operator reads from S3, against the real MinIO fixture."""

from __future__ import annotations

import json

import pytest

from gdpval.api.v1alpha1 import OutputSpec
from gdpval.controller.effects import s3 as s3io
from gdpval.controller.pure.ledger import Outcome
from gdpval.dataset.models import DatasetRef, Sample, Task
from gdpval.manifest import ManifestEntry, dump_manifest
from gdpval.records import is_prepared
from gdpval.sample import SampleResult, SampleStatus, Usage
from gdpval.storage import NotFound, layout
from support import runs

pytestmark = pytest.mark.s3


@pytest.fixture
def storage(s3):
    bucket = s3.make_bucket()
    output = OutputSpec(url=f"s3://{bucket}/pre", endpoint=s3.endpoint_url, region=s3.region)
    return s3io.open_output(output, {"access_key_id": s3.access_key, "secret_access_key": s3.secret_key})


def _prepare(storage, run="r"):
    record = runs.record(run, dataset=DatasetRef(source="s3", location="s3://d/x", revision="rev9"), model="m")
    entries = [ManifestEntry(sample=Sample.of(t, 0), task=Task(task_id=t, sector="s", occupation="o", prompt="p")) for t in ("b", "a")]
    storage.put_text(layout.manifest(run), dump_manifest(entries))
    storage.put_text(layout.run_json(run), record.dump())


def _commit(storage, sample, attempt, ok=True, run="r"):
    result = SampleResult(
        sample_id=sample,
        task_id=sample,
        attempt=attempt,
        status=SampleStatus.succeeded if ok else SampleStatus.failed,
        error_kind=None if ok else "max_steps",
        usage=Usage(input_tokens=3, output_tokens=4),
        api_errors=2,
    )
    storage.put_text(layout.result(run, sample, attempt), result.model_dump_json())


def test_samples_probes_and_rebuild(storage):
    assert not is_prepared(storage, "r")
    _prepare(storage)
    assert is_prepared(storage, "r")
    samples, sectors, revision = s3io.load_samples(storage, "r")
    assert samples == ("b-r0", "a-r0") and revision == "rev9" and set(sectors) == set(samples) and all(sectors.values())
    assert s3io.probe(storage, "r", "b-r0", 1, False).has_files is False
    storage.put_text(f"{layout.deliverables('r', 'b-r0', 1)}/x.txt", "partial")
    assert s3io.probe(storage, "r", "b-r0", 1, False).has_files is True
    _commit(storage, "b-r0", 1, ok=False)
    _commit(storage, "b-r0", 2)
    p = s3io.probe(storage, "r", "b-r0", 2, True)
    assert p.committed.succeeded and p.committed.input_tokens == 3 and p.committed.api_errors == 2 and p.pod_exists
    ledger = s3io.rebuild_ledger(storage, "r", 100.0)
    assert ledger["b-r0"].outcome == Outcome.succeeded and ledger["b-r0"].attempt == 2 and ledger["b-r0"].input_tokens == 6
    assert "a-r0" not in ledger


def test_submission_info(storage):
    with pytest.raises(NotFound):
        s3io.read_submission(storage, "r")
    storage.put_text(f"{layout.submission('r')}/repeat-0/submission_info.json", json.dumps({"submission_ready": 1.0, "completed": 1.0, "counts": {"total": 3}}))
    storage.put_text(f"{layout.submission('r')}/repeat-1/submission_info.json", json.dumps({"submission_ready": 1.0, "completed": 0.0, "counts": {"total": 1}}))
    sub = s3io.read_submission(storage, "r")
    assert sub.uri.endswith("/pre/runs/r/submission") and (sub.ready_rate, sub.completed_rate) == (1.0, 0.75)
    assert (sub.grading_ready_rate, sub.grading_text_only) == (None, None)  # never checked: no figure
    checked = {"submission_ready": 1.0, "completed": 1.0, "counts": {"total": 3}, "grading_ready": 0.5, "grading_text_only": True}
    storage.put_text(f"{layout.submission('r')}/repeat-0/submission_info.json", json.dumps(checked))
    sub = s3io.read_submission(storage, "r")
    assert (sub.grading_ready_rate, sub.grading_text_only) == (0.5, True)
    assert sub.report_uri is None  # the assemble Job writes the report after the packages; it may have failed
    storage.put_text(layout.report("r"), "<!DOCTYPE html>")
    assert s3io.read_submission(storage, "r").report_uri == storage.url(layout.report("r"))

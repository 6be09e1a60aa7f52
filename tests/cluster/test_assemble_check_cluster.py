"""The assemble Job's readiness check renders as the judge does: built by the operator's own builder, it opens a
committed docx and xlsx in its render sidecar of the full sandbox image, so check.json counts their pages and sheets
as a local check with the full runtime does; the same Job with the slim image says it checked text only."""

from __future__ import annotations

import json
import secrets

import pytest

from gdpval.api.v1alpha1 import GdpvalRunSpec
from gdpval.controller.pure import manifests as m
from gdpval.storage import layout
from gdpval.storage.s3 import S3Storage
from gdpval.submission.readiness import CheckResults
from support import runs
from support.operator import Kube, project_images, restricted_namespace, run_manifest
from support.standins import standin_bytes

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

JOB_TIMEOUT = 600
FILES = {"memo.docx": standin_bytes("memo.docx"), "budget.xlsx": standin_bytes("budget.xlsx")}


def _assemble(kube: Kube, bucket: str, endpoint: str, run: str, agent: str, sandbox: str) -> str:
    """The operator's assemble Job for `run` (its storage already written), applied without an owning GdpvalRun."""
    manifest = run_manifest(
        run, kube.namespace, model_url="http://127.0.0.1:1/v1", dataset="x", output_url=f"s3://{bucket}/out", endpoint=endpoint, images=(agent, sandbox)
    )
    ctx = m.RunContext(run, kube.namespace, secrets.token_hex(8), GdpvalRunSpec.model_validate(manifest["spec"]), agent, sandbox, legacy_storage=True)
    job = m.assemble_job(ctx)
    del job["metadata"]["ownerReferences"]  # no GdpvalRun owns it here: the garbage collector would remove it
    kube.apply(job)
    return job["metadata"]["name"]


def test_the_assemble_jobs_check_counts_office_pages_in_the_full_images_sidecar(cluster, cluster_s3, full_image):
    agent, slim = project_images(cluster)
    kube = Kube(str(cluster.kubeconfig), f"gdpval-assemble-check-{secrets.token_hex(3)}", cluster.kubectl_path)
    restricted_namespace(kube, cluster_s3)
    bucket = cluster_s3.make_bucket()
    storage = S3Storage(bucket, "out", cluster_s3.client())
    try:
        entries = runs.entries([runs.task("memo", prompt="Write the memo as a Word document and the budget as an Excel workbook.")])
        for run in ("full", "slim"):
            runs.write_run(storage, run, entries)
            runs.commit(storage, run, entries[0], 1, runs.succeeded(entries[0], 1, FILES), FILES)
        jobs = {run: _assemble(kube, bucket, cluster_s3.endpoint_url, run, agent, image) for run, image in (("full", full_image), ("slim", slim))}
        for run, job in jobs.items():
            done = kube.run("wait", "--for=condition=Complete", f"job/{job}", f"--timeout={JOB_TIMEOUT}s", check=False, timeout=JOB_TIMEOUT + 60)
            logs = kube.run("logs", f"job/{job}", "--all-containers", check=False).stdout[-4000:]
            assert done.returncode == 0, f"{run}: {done.stderr}\n{logs}"
        full, text = (CheckResults.model_validate_json(storage.get_bytes(layout.check_results(run))) for run in ("full", "slim"))
        info = json.loads(storage.get_text(f"{layout.submission('full')}/{layout.SUBMISSION_INFO}"))
    finally:
        kube.run("delete", "namespace", kube.namespace, "--wait=false", check=False)
    assert (full.renderer, full.text_only) == (f"pod sidecar of image {full_image}", False), full.renderer
    files = {f.name: f for f in full.samples[0].files}
    assert files["memo.docx"].pages == 1 and (files["budget.xlsx"].pages, files["budget.xlsx"].sheets) == (1, 1), full.model_dump_json()
    assert full.grading_ready == 1.0 and info["grading_ready"] == 1.0 and info["grading_text_only"] is False
    assert text.text_only and "host child" in text.renderer, text.renderer  # the slim image has no LibreOffice: said, not silent
    plain = {f.name: f for f in text.samples[0].files}
    assert plain["memo.docx"].pages is None and plain["budget.xlsx"].pages is None, text.model_dump_json()  # no LibreOffice, no pages

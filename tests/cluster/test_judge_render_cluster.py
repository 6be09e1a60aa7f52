"""The cluster judge renders with LibreOffice: a pairwise-judged run whose sandbox image is the full one renders the
gold's docx and xlsx in its judge Job's sidecar of that image, so the judge was shown their pages, and every
rendering names the sidecar's image; no host child, no text-only fallback."""

from __future__ import annotations

import json

import pytest

from gdpval.fakemodel.server import start_background
from gdpval.judge.verdicts import PairResults
from gdpval.storage import layout
from support import stress
from support.operator import operator_namespace, project_images, run_folder

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TASKS = 3  # the stress gold cycles docx, xlsx, pdf
RUN_TIMEOUT = 900


def test_the_judge_job_renders_office_gold_with_libreoffice_in_the_full_image(cluster, cluster_s3, full_image, tmp_path_factory):
    dataset = stress.make_stress_dataset(tmp_path_factory.mktemp("stress"), "current")
    images = (project_images(cluster)[0], full_image)
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-judge-render", dataset, tmp_path_factory.mktemp("operator"), images) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
    ):
        judge = {"model": "scripted", "baseURL": model.base_url, "concurrency": 2, "tries": 2, "method": "pairwise"}
        ns.kube.apply(ns.manifest("rendered", model.base_url, selection={"limit": TASKS}, judge=judge))
        done = ns.kube.run("wait", "--for=condition=Succeeded", "gdpvalrun/rendered", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 60)
        status = ns.kube.run_status("rendered")
        assert done.returncode == 0, f"{status}\n{ns.operator.logs()[-4000:]}"
        assert status["judge"]["state"] == "Succeeded", status["judge"]
        key = f"out/{layout.judge_pair_results(run_folder(status), 'gold')}"
        results = PairResults.model_validate_json(ns.client.get_object(Bucket=ns.bucket, Key=key)["Body"].read())
    scores = results.samples
    assert len(scores) == TASKS and all(s.verdict != "failed" for s in scores), [s.error for s in scores]
    assert {r.split(" ", 1)[1] for s in scores for r in s.renderers} == {f"pod sidecar of image {full_image}"}, [s.renderers for s in scores]
    gold_pages = {p.file.rsplit(".", 1)[-1] for s in scores for p in s.pages if p.side == "theirs"}
    assert {"docx", "xlsx"} <= gold_pages, json.dumps([s.views for s in scores])
    office_views = [v for s in scores for v in s.views if v.startswith("theirs:") and (".docx:" in v or ".xlsx:" in v)]
    assert office_views and all("image(s)" in v for v in office_views), office_views

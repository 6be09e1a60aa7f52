"""The pod half of the local runtime's acceptance: the office task of tests/support/office_task.py (build a
pptx with python-pptx, convert it to PDF with LibreOffice, render a page to PNG) in a sample pod whose
sandbox is the full sandbox image, the same script that succeeds locally in the full runtime
(tests/images/test_runtime_office_task.py).

The image is this tree's (`images/sandbox/build.sh`), imported into the cluster's containerd once per
content tag (`build.sh import`; about 2.5 GB). The namespace enforces the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import pytest

from gdpval.fakemodel.model import SCRIPT_BODY_FIELD
from gdpval.fakemodel.server import start_background
from gdpval.storage import layout
from support.office_task import FILES, STEPS
from support.operator import operator_namespace, project_images, result_keys, run_folder
from support.standins import make_standin_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 600


def test_the_office_task_succeeds_in_a_sample_pod_of_the_full_image(cluster, cluster_s3, sample_dataset, full_image, tmp_path_factory):
    dataset = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset"))
    images = (project_images(cluster)[0], full_image)
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-full", dataset, tmp_path_factory.mktemp("operator"), images) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
    ):
        ns.kube.apply(ns.manifest("office", model.base_url, selection={"limit": 1}, model={"extraBody": {SCRIPT_BODY_FIELD: STEPS}}))
        done = ns.kube.run("wait", "--for=condition=Succeeded", "gdpvalrun/office", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 30)
        assert done.returncode == 0, f"{ns.kube.run_status('office')}\n--- operator log tail ---\n{ns.operator.logs()[-4000:]}"
        folder = run_folder(ns.kube.run_status("office"))
        ((sample, attempts),) = result_keys(ns.client, ns.bucket, "out", folder).items()
        root = f"out/{layout.deliverables(folder, sample, attempts[-1][0])}"
        files = {name: ns.client.get_object(Bucket=ns.bucket, Key=f"{root}/{name}")["Body"].read() for name in FILES}
    assert files["deck.pdf"].startswith(b"%PDF-") and files["page-1.png"].startswith(b"\x89PNG") and files["deck.pptx"].startswith(b"PK")

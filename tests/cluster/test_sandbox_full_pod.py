"""The pod half of the local runtime's acceptance: the office task of tests/support/office_task.py (build a
pptx with python-pptx, convert it to PDF with LibreOffice, render a page to PNG) in a sample pod whose
sandbox is the full sandbox image, the same script that succeeds locally in the full runtime
(tests/integration/test_runtime_office_task.py).

The image is this tree's (`images/sandbox/build.sh`), imported into the cluster's containerd once per
content tag (`build.sh import`; about 2.5 GB). The namespace enforces the `restricted` Pod Security Standard.
"""

from __future__ import annotations

import secrets
import subprocess

import pytest
from operator_support import Kube, OperatorProcess, image_ref, install_crd, restricted_namespace, result_keys, run_folder, run_manifest, upload_tree

from gdpval.fakemodel.server import SCRIPT_BODY_FIELD, start_background
from gdpval.storage import layout
from infra.paths import REPO_ROOT
from support.office_task import FILES, STEPS
from support.standins import make_standin_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

BUILD = REPO_ROOT / "images" / "sandbox" / "build.sh"
AGENT_IMAGE = image_ref("operator", "localhost/gdpval-operator:dev")
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def full_image(cluster) -> str:
    """This tree's full sandbox image, built if needed and in the cluster's containerd."""
    for step in ("build", "import"):
        done = subprocess.run(["bash", str(BUILD), step], capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, f"images/sandbox/build.sh {step} failed: {done.stderr[-3000:]}"
    return subprocess.run(["bash", str(BUILD), "ref"], capture_output=True, text=True, check=True).stdout.strip()


def test_the_office_task_succeeds_in_a_sample_pod_of_the_full_image(cluster, cluster_s3, sample_dataset, full_image, tmp_path_factory):
    namespace = f"gdpval-full-{secrets.token_hex(3)}"
    kube = Kube(str(cluster.kubeconfig), namespace, cluster.kubectl_path)
    install_crd(kube)
    restricted_namespace(kube, cluster_s3)
    bucket, client = cluster_s3.make_bucket(), cluster_s3.client()
    upload_tree(client, bucket, "dataset", make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset")))
    images = (cluster.images.get("operator", AGENT_IMAGE), full_image)
    operator = OperatorProcess(str(cluster.kubeconfig), namespace, *images, tmp_path_factory.mktemp("operator")).start()
    try:
        with start_background(host=cluster.node_ip, port=0) as model:
            manifest = run_manifest(
                "office",
                namespace,
                model_url=model.base_url,
                dataset=f"s3://{bucket}/dataset",
                output_url=f"s3://{bucket}/out",
                endpoint=cluster_s3.endpoint_url,
                images=images,
                selection={"limit": 1},
                model={"extraBody": {SCRIPT_BODY_FIELD: STEPS}},
            )
            kube.apply(manifest)
            done = kube.run("wait", "--for=condition=Succeeded", "gdpvalrun/office", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 30)
            assert done.returncode == 0, f"{kube.run_status('office')}\n--- operator log tail ---\n{operator.logs()[-4000:]}"
        folder = run_folder(kube.run_status("office"))
        ((sample, attempts),) = result_keys(client, bucket, "out", folder).items()
        attempt = attempts[-1][0]
        root = f"out/{layout.deliverables(folder, sample, attempt)}"
        files = {name: client.get_object(Bucket=bucket, Key=f"{root}/{name}")["Body"].read() for name in FILES}
        assert files["deck.pdf"].startswith(b"%PDF-") and files["page-1.png"].startswith(b"\x89PNG") and files["deck.pptx"].startswith(b"PK")
    finally:
        operator.stop()
        kube.run("delete", "namespace", namespace, "--wait=false", check=False)

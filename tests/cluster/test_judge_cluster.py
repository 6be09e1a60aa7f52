"""spec.judge on the real local cluster: a GdpvalRun over stress tasks (current revision, with rubrics) is judged
by a Job after assembly and Succeeds with status.judge; a judge that cannot work is recorded and the run still Succeeds."""

from __future__ import annotations

import json

import pytest

from gdpval.fakemodel.server import start_background
from gdpval.judge import LABEL
from support import stress
from support.operator import Kube, OperatorProcess, operator_namespace, run_folder

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TASKS = 3
RUN_TIMEOUT = 900


@pytest.fixture(scope="module")
def env(cluster, cluster_s3, tmp_path_factory):
    dataset = stress.make_stress_dataset(tmp_path_factory.mktemp("stress"), "current")
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-judge", dataset, tmp_path_factory.mktemp("operator")) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
    ):

        def manifest(name: str, judge_model: str) -> dict:
            judge = {"model": judge_model, "baseURL": model.base_url, "concurrency": 2, "tries": 2}
            return ns.manifest(name, model.base_url, selection={"limit": TASKS}, judge=judge)

        yield ns.kube, ns.operator, ns.client, ns.bucket, manifest


def succeeded(kube: Kube, operator: OperatorProcess, name: str) -> dict:
    done = kube.run("wait", "--for=condition=Succeeded", f"gdpvalrun/{name}", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 60)
    status = kube.run_status(name)
    assert done.returncode == 0, f"{name} not Succeeded: {status}\n{operator.logs()[-4000:]}"
    return status


def test_a_judged_run_succeeds_with_its_estimate_and_a_failed_judge_does_not_fail_it(env):
    kube, operator, client, bucket, manifest = env
    kube.apply(manifest("judged", "scripted"))
    kube.apply(manifest("misjudged", "no-such-judge"))
    status = succeeded(kube, operator, "judged")
    judge = status["judge"]
    assert (judge["state"], judge["scored"], judge["failed"], judge["label"]) == ("Succeeded", TASKS, 0, LABEL)
    assert 0 <= judge["score"] <= 1 and judge["maxPoints"] > 0 and "judge estimate" in json.dumps(status["conditions"])
    assert judge["resultsURI"] == f"{status['storageURI']}/judge/results.json"
    results = json.loads(client.get_object(Bucket=bucket, Key=f"out/runs/{run_folder(status)}/judge/results.json")["Body"].read())
    assert results["label"] == LABEL and results["overall"]["points"] == judge["points"] and len(results["samples"]) == TASKS

    failed = succeeded(kube, operator, "misjudged")
    assert failed["judge"]["state"] == "Failed" and "the judge Job" in failed["judge"]["message"] and failed["submissionURI"]

"""spec.judge on the real local cluster: a GdpvalRun over stress tasks (current revision, with rubrics) is judged
by a Job after assembly and Succeeds with status.judge; a judge that cannot work is recorded and the run still Succeeds."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from urllib.parse import urlparse

import pytest

from gdpval.fakemodel.server import start_background
from gdpval.judge import LABEL
from gdpval.judge.verdicts import PAIRWISE_LABEL
from support import stress
from support.gold_search import found, search_code, tool_outputs
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


@pytest.mark.long
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


def gold_keys(client, bucket: str) -> list[str]:
    """The gold the judge Job mirrored into the run's bucket (judge-only/), as object keys."""
    listed = client.list_objects_v2(Bucket=bucket, Prefix="out/judge-only/")
    return [o["Key"] for o in listed.get("Contents", ())]


@pytest.mark.long
def test_a_pairwise_judged_run_carries_its_totals_and_no_sample_pod_reaches_the_gold(env, cluster_s3):
    """spec.judge.method pairwise: the judge Job mirrors the gold and status.judge.pairwise carries the totals. Then a
    run whose sample pods search their sandbox's whole file system, connect to every address they know and fetch
    the gold's own keys without credentials finds none of it."""
    kube, operator, client, bucket, manifest = env
    paired = manifest("paired", "scripted")
    paired["spec"]["judge"]["method"] = "pairwise"
    kube.apply(paired)
    status = succeeded(kube, operator, "paired")
    judge, pairwise = status["judge"], status["judge"]["pairwise"]
    assert judge["method"] == "pairwise" and judge["state"] == "Succeeded" and judge["label"] == PAIRWISE_LABEL
    assert pairwise["samples"] == TASKS and pairwise["failed"] == 0 and pairwise["wins"] + pairwise["ties"] + pairwise["losses"] == TASKS
    assert pairwise["resultsURI"] == f"{status['storageURI']}/judge/pairwise/gold/results.json" and pairwise["winsOrTies"] is not None
    keys = gold_keys(client, bucket)
    assert any(k.endswith("/gold.json") for k in keys)

    endpoint = urlparse(cluster_s3.endpoint_url)
    model = urlparse(paired["spec"]["model"]["baseURL"])
    gold_names = sorted({PurePosixPath(k).name for k in keys if "/deliverable_files/" in k})
    code = search_code(
        [(endpoint.hostname, endpoint.port), (model.hostname, model.port)], [f"{cluster_s3.endpoint_url}/{bucket}/{k}" for k in keys], gold_names
    )
    find = "find / \\( -path /proc -o -path /sys \\) -prune -o -iname '*final*' -print 2>/dev/null; echo FIND-DONE"
    hunt = manifest("hunt", "scripted")
    hunt["spec"].pop("judge")
    hunt["spec"]["model"]["extraBody"] = {"fake_script": [{"bash": find}, {"python_exec": code}]}
    kube.apply(hunt)
    done = succeeded(kube, operator, "hunt")
    prefix = f"out/runs/{run_folder(done)}/samples/"
    transcripts = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", ()) if o["Key"].endswith("/transcript.jsonl")]
    assert len(transcripts) >= TASKS
    for key in transcripts:
        text = client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
        report = found(text)
        [listed] = tool_outputs(text, "bash")
        assert "FIND-DONE" in listed and not any(name in listed for name in gold_names), listed
        assert report["read"] > 100 and report["hits"] == [] and report["names"] == [] and report["fetched"] == [], report

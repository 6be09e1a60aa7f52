"""A GdpvalRun whose model endpoint goes away in the middle (issue 20), on the real cluster: the
scripted model answers 503 to everything for a while after its Nth chat request, sample pods wait it
out for spec.samples.outageHoldSeconds and end without committing, the operator holds their attempts
(condition ModelUnavailable, no new pods), probes with one held attempt, and resumes by itself.
The outage is scaled down from the acceptance's ten minutes (bench/endpoint.py runs the real one)."""

from __future__ import annotations

import pytest

from gdpval.fakemodel.server import start_background
from support.operator import assert_committed_once, operator_namespace, result_keys, run_folder
from support.standins import make_standin_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 1200
TASKS = 12
OUTAGE_AFTER = 40  # chat requests: a few samples are mid-loop when it starts
# Longer than the pods' hold (10 s) and the operator's wait before its probe (30 s): held attempts and a
# probe are needed, and the probe's pod meets the outage's end (90 s, before, needed a second probe).
OUTAGE_SECONDS = 45.0


@pytest.mark.long
def test_an_outage_holds_attempts_and_the_run_resumes_without_spending_one(cluster, cluster_s3, sample_dataset, tmp_path_factory):
    dataset = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset"))
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-outage", dataset, tmp_path_factory.mktemp("operator")) as ns,
        start_background(host=cluster.node_ip, port=0, outage_after=OUTAGE_AFTER, outage_seconds=OUTAGE_SECONDS, latency=0.2) as model,
    ):
        kube = ns.kube
        kube.apply(ns.manifest("outage", model.base_url, samples={"retries": 0, "outageHoldSeconds": 10}))
        held = kube.wait_for(lambda: _true(kube.condition("outage", "ModelUnavailable")), RUN_TIMEOUT, "condition ModelUnavailable")
        assert "no attempt spent" in held["message"]
        done = kube.run("wait", "--for=condition=Finished", "gdpvalrun/outage", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 30)
        status = kube.run_status("outage")
        assert done.returncode == 0, f"{status}\n--- operator log tail ---\n{ns.operator.logs()[-4000:]}"
        assert model.stats()["statuses"].get(503, 0) >= 5  # the outage met calls
    assert status["state"] == "Succeeded" and status["samples"]["succeeded"] == TASKS, status
    assert not _true(next(c for c in status["conditions"] if c["type"] == "ModelUnavailable"))
    committed = result_keys(ns.client, ns.bucket, "out", run_folder(status))
    assert len(committed) == TASKS
    assert_committed_once(committed)
    assert {attempt for attempts in committed.values() for attempt, _ in attempts} == {1}  # retries 0: no attempt went to the outage


def _true(condition: dict | None) -> dict | None:
    return condition if condition and condition.get("status") == "True" else None

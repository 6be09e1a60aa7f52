"""A whole GdpvalRun over the stress dataset (13 columns, gold stand-ins in docx, xlsx and pdf) judged
pairwise by its judge Job, whose process is SIGKILLed midway: the Job's next pod resumes from the call cache and
the stored verdicts, the scripted judge answers each (pair, order) once, and status.judge carries the totals the
dataset implies. The judge has its own scripted server, so its calls are counted and held apart from the agents'.

The suite runs the dataset's first 24 tasks (`GDPVAL_JUDGE_STRESS_TASKS`, default 24): the same kill, resume and
count, in minutes. All 220 (`GDPVAL_JUDGE_STRESS_TASKS=220`) took 653 s on a quiet node, which the suite's time
budget cannot hold; bench/README.md has the figures."""

from __future__ import annotations

import os
import time

import pyarrow.parquet as pq
import pytest

from gdpval.controller.pure import names
from gdpval.fakemodel.server import start_background
from gdpval.judge.verdicts import PAIRWISE_LABEL
from support import stress
from support.judged import PREFER_GOLD_ON_REFERENCES, expected_verdicts
from support.operator import operator_namespace, sigkill_in_pod
from support.polling import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TASKS = int(os.environ.get("GDPVAL_JUDGE_STRESS_TASKS", "24"))
PARALLELISM = 12
CONCURRENCY = 4
CALLS = 2 * TASKS  # every sample has a deliverable: both orders of each pair
ANSWERED_BEFORE_KILL = CALLS // 2 + 1  # odd: at least one pair is cut between its two orders
RUN_TIMEOUT = 3600
JUDGE_SELECTOR = f"{names.L_COMPONENT}={names.COMPONENT_JUDGE}"


@pytest.fixture(scope="module")
def env(cluster, cluster_s3, tmp_path_factory):
    dataset = stress.make_stress_dataset(tmp_path_factory.mktemp("stress"), "current")
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-judge-stress", dataset, tmp_path_factory.mktemp("operator")) as ns,
        start_background(host=cluster.node_ip, port=0) as model,
        start_background(host=cluster.node_ip, port=0, model="judge", judge_prefers=PREFER_GOLD_ON_REFERENCES, hold_after=ANSWERED_BEFORE_KILL) as judge,
    ):
        yield ns, model, judge, dataset


def judge_pods(kube) -> list[dict]:
    return (kube.get("pods", selector=JUDGE_SELECTOR) or {}).get("items", [])


def killed_state(kube, uid: str) -> dict | None:
    """The terminated state of the judge pod `uid`'s container, once the kubelet reports it (the succeeded run deletes the Job)."""
    for pod in judge_pods(kube):
        if pod["metadata"]["uid"] == uid:
            return next((c["state"]["terminated"] for c in pod["status"].get("containerStatuses", []) if "terminated" in c["state"]), None)
    return None


@pytest.mark.long
def test_a_whole_run_judged_pairwise_on_the_cluster_survives_a_sigkill_without_judging_a_pair_twice(env):
    ns, model, judge, dataset = env
    kube = ns.kube
    spec = {"model": "judge", "baseURL": judge.base_url, "concurrency": CONCURRENCY, "tries": 3, "method": "pairwise"}
    started = time.monotonic()
    kube.apply(ns.manifest("judged", model.base_url, parallelism=PARALLELISM, judge=spec, selection={"limit": TASKS}))

    def held_or_finished() -> bool:
        finished = any(c["type"] == "Finished" and c["status"] == "True" for c in kube.run_status("judged").get("conditions", []))
        return judge.stats()["held"] == CONCURRENCY or finished

    wait_until(held_or_finished, RUN_TIMEOUT, "every judge worker waiting on a held reply", 2)
    answered, judging_at = judge.stats()["completions"], time.monotonic()
    assert judge.stats()["held"] == CONCURRENCY, f"finished before the judge was held: {kube.run_status('judged')}"
    [pod] = [p for p in judge_pods(kube) if p["status"].get("phase") == "Running"]
    killed = sigkill_in_pod(pod["metadata"]["uid"], "gdpval judge")
    judge.release(cut=True)  # the held calls' client is gone: they get no answer
    assert killed and answered == ANSWERED_BEFORE_KILL, (killed, answered)
    terminated = wait_until(lambda: killed_state(kube, pod["metadata"]["uid"]), 300, "the killed judge container terminated", 1)
    assert terminated["exitCode"] == 128 + 9, terminated
    job = names.job_name("judged", names.COMPONENT_JUDGE)
    wait_until(lambda: (kube.get("job", job) or {}).get("status", {}).get("failed") == 1, 300, "the judge Job counting its killed pod", 1)

    done = kube.run("wait", "--for=condition=Succeeded", "gdpvalrun/judged", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 60)
    status = kube.run_status("judged")
    assert done.returncode == 0, f"not Succeeded: {status}\n{ns.operator.logs()[-4000:]}"
    finished = time.monotonic()
    stats = judge.stats()
    print(
        f"\n{TASKS}-sample GdpvalRun judged pairwise: {judging_at - started:.0f}s until the judge had made {answered} calls "
        f"(sample pods at parallelism {PARALLELISM}, then the judge Job), {finished - judging_at:.0f}s more to Succeeded"
    )
    assert stats["completions"] == CALLS and stats["judge_repeats"] == 0 and stats["faults"]["cut"] == CONCURRENCY, stats

    expected = expected_verdicts(pq.read_table(dataset / stress.PARQUET).to_pylist()[:TASKS])[""]
    judged, pairwise = status["judge"], status["judge"]["pairwise"]
    assert (judged["method"], judged["state"], judged["label"]) == ("pairwise", "Succeeded", PAIRWISE_LABEL)
    totals = (pairwise["samples"], pairwise["wins"], pairwise["ties"], pairwise["losses"], pairwise["inconsistent"], pairwise["failed"])
    assert totals == (TASKS, *expected, 0, 0), pairwise
    assert pairwise["winsOrTies"] == pytest.approx(expected[1] / TASKS, abs=1e-4)  # rounded to 4 places
    assert pairwise["intervalLow"] < pairwise["winsOrTies"] < pairwise["intervalHigh"]

"""A whole run queued in Kueue as one Workload: the manifest, its status read and written, and the run's gate."""

from __future__ import annotations

from dataclasses import replace

from gdpval.api.v1alpha1 import GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import names as n
from gdpval.controller.pure import queue as q
from gdpval.controller.pure import workload as w
from gdpval.controller.pure.decide import decide, needed_probes
from gdpval.controller.pure.ledger import Entry, Outcome
from gdpval.controller.pure.observe import JobView, PodView, iso
from gdpval.controller.pure.status import build_status
from gdpval.controller.types import QUEUE_POLL_SECONDS, WORKLOAD_CREATE, WORKLOAD_FINISH, WORKLOAD_RELEASE, WORKLOAD_RESIZE, Blocker, Observed, Probe

NOW = 1_000_000.0
SAMPLES = ("t0-r0", "t1-r0", "t2-r0")
QUEUED = w.Queueing("team-a", "high")


def spec(**kw) -> GdpvalRunSpec:
    base = {"model": {"name": "m"}, "output": {"url": "s3://b/p"}, "parallelism": 2, "pod": {"resources": {"agent": {"requests": {"cpu": "250m"}}}}}
    return GdpvalRunSpec.model_validate(base | kw)


def workload(*conditions: tuple[str, str, str], admission: bool = False, version: str = "7", pods: int = 2) -> w.WorkloadView:
    conds = [{"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": iso(NOW - 60)} for t, s, r in conditions]
    body = {
        "metadata": {"name": "wl", "resourceVersion": version},
        "spec": {"podSets": [{"name": q.POD_SET, "count": pods}]},
        "status": {"conditions": conds} | ({"admission": {"clusterQueue": "cq"}} if admission else {}),
    }
    return w.parse_workload(body)


PENDING = workload(("QuotaReserved", "False", "Pending"))
ADMITTED = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), admission=True)
EVICTED = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), ("Evicted", "True", "Preempted"), admission=True)


def obs(**kw) -> Observed:
    base = dict(now=NOW, spec=spec(), generation=1, status=GdpvalRunStatus(), ledger={}, samples=SAMPLES, queueing=QUEUED)
    return Observed(**(base | kw))


def pod(sample: str, phase: str = "Running") -> PodView:
    return PodView(name=n.sample_pod_name("run", sample, 1), component="sample", sample=sample, attempt=1, phase=phase, deleting=False, created=NOW - 5)


def test_queueing_comes_from_the_run_labels():
    assert w.Queueing.of({w.QUEUE_LABEL: "team-a", w.PRIORITY_LABEL: "high"}) == QUEUED
    assert w.Queueing.of({w.PRIORITY_LABEL: "high"}) is None and w.Queueing.of(None) is None


def test_the_workload_is_one_podset_of_the_windows_and_the_ahead_sample_pods_shaped_by_the_sample_pod_builder():
    ctx = m.RunContext("demo", "ns", "0123456789-uid", spec(parallelism=3, samples={"startAhead": 2}), "agent:1", "sandbox:1")
    wl = q.workload_manifest(ctx, QUEUED, priority=100)
    pod = m.sample_pod(ctx, "x", 1)["spec"]
    assert wl["metadata"]["name"] == q.workload_name("demo", "0123456789-uid") and wl["metadata"]["namespace"] == "ns"
    assert wl["metadata"]["ownerReferences"] == [ctx.owner_reference()] and wl["metadata"]["ownerReferences"][0]["controller"]
    assert wl["spec"]["queueName"] == "team-a" and wl["spec"]["priority"] == 100
    assert wl["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    (pod_set,) = wl["spec"]["podSets"]
    assert pod_set["name"] == "sample" and pod_set["count"] == 5, "pods waiting ahead hold what they request too"
    assert w.parse_workload(wl).pods == 5
    template = pod_set["template"]["spec"]
    assert [c["resources"] for c in template["containers"]] == [c["resources"] for c in pod["containers"]]
    assert template["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    assert [(c["name"], c.get("restartPolicy")) for c in template["initContainers"]] == [(c["name"], c.get("restartPolicy")) for c in pod["initContainers"]]
    assert "env" not in str(template), "no Secret references or settings in the Workload"


def test_a_workload_name_differs_per_run_instance():
    assert q.workload_name("demo", "aaaaa-1") != q.workload_name("demo", "bbbbb-1")
    assert len(q.workload_name("r" * 63, "uid")) <= 63


def test_parse_reads_admission_and_eviction():
    assert not PENDING.runs and PENDING.pending_message == "QuotaReserved Pending"
    assert ADMITTED.runs and ADMITTED.resource_version == "7"
    assert EVICTED.reserved and not EVICTED.runs and EVICTED.evicted == "Preempted"
    unreserved = workload(("QuotaReserved", "False", "Pending"), ("Evicted", "True", "Preempted"))
    assert not unreserved.reserved and not q.must_release(unreserved, active=False)


def test_hold_reasons_name_the_queue():
    assert q.hold_reason(QUEUED, None) == (q.QUEUED, "waiting for admission by Kueue in queue team-a")
    assert q.hold_reason(QUEUED, PENDING)[1].endswith(": QuotaReserved Pending")
    assert q.hold_reason(QUEUED, EVICTED)[0] == q.EVICTED and q.hold_reason(QUEUED, ADMITTED) is None


def test_release_gives_the_quota_back_as_kueue_does_for_a_stopped_job():
    patch = q.release_patch(EVICTED, NOW)
    assert patch["metadata"] == {"resourceVersion": "7"} and patch["status"]["admission"] is None
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert conds["QuotaReserved"]["lastTransitionTime"] == iso(NOW) and conds["Evicted"]["lastTransitionTime"] == iso(NOW - 60)
    assert (conds["Admitted"]["status"], conds["Requeued"]["status"]) == ("False", "True"), "a preempted Workload queues again"
    deactivated = workload(("QuotaReserved", "True", "QuotaReserved"), ("Evicted", "True", "Deactivated"), admission=True)
    assert {c["type"]: c["status"] for c in q.release_patch(deactivated, NOW)["status"]["conditions"]}["Requeued"] == "False"


def test_finish_marks_the_workload_finished_with_the_runs_outcome():
    for succeeded, reason in ((True, "Succeeded"), (False, "Failed")):
        conds = {c["type"]: c for c in q.finish_patch(ADMITTED, succeeded, "done", NOW)["status"]["conditions"]}
        assert (conds["Finished"]["status"], conds["Finished"]["reason"], conds["Finished"]["message"]) == ("True", reason, "done")
        assert conds["Admitted"]["status"] == "True"


def test_a_queued_run_creates_its_workload_and_nothing_else_until_admitted():
    for o in (obs(samples=None), obs(samples=None, workload=PENDING)):
        plan = decide(o)
        assert plan.create_jobs == [] and plan.create_pods == [] and plan.state == "Suspended" and plan.reason == q.QUEUED
        assert "waiting for admission by Kueue in queue team-a" in plan.message
        assert plan.requeue_after(NOW) == QUEUE_POLL_SECONDS, "Kueue's decision is polled"
    assert decide(obs(samples=None)).workload == WORKLOAD_CREATE and decide(obs(samples=None, workload=PENDING)).workload == ""
    cond = next(c for c in build_status(obs(samples=None), decide(obs(samples=None))).conditions if c.type == "Suspended")
    assert (cond.status, cond.reason) == ("True", q.QUEUED), "the deadline pauses while queued"
    plan = decide(obs(samples=None, workload=ADMITTED))
    assert plan.create_jobs == ["prepare"] and plan.workload == "" and plan.reason == "Preparing"


def test_without_the_kueue_api_nothing_is_created():
    blocker = Blocker("KueueNotInstalled", "no Workload API")
    plan = decide(obs(samples=None, blockers=(blocker,)))
    assert plan.workload == "" and plan.create_jobs == []


def test_an_admitted_run_fills_its_window_and_an_unqueued_run_never_touches_a_workload():
    assert decide(obs(workload=ADMITTED)).create_pods == [("t0-r0", 1), ("t1-r0", 1)]
    plan = decide(obs(queueing=None))
    assert plan.workload == "" and len(plan.create_pods) == 2


def test_eviction_stops_the_run_like_suspend_then_releases_the_quota_and_resumes_under_the_same_attempts():
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    live = (pod("t0-r0"), pod("t1-r0"))
    plan = decide(obs(ledger=ledger, pods=live, workload=EVICTED, jobs={}))
    assert sorted(plan.delete_pods) == sorted(p.name for p in live) and plan.create_pods == []
    assert {e.outcome for e in plan.ledger.values()} == {Outcome.paused} and plan.reason == q.EVICTED
    assert plan.workload == "", "the quota is held until the pods are gone"
    gone = obs(ledger=plan.ledger, workload=EVICTED)
    assert needed_probes(gone) == [] and decide(gone).workload == WORKLOAD_RELEASE
    requeued = workload(("QuotaReserved", "False", "Pending"), ("Evicted", "True", "Preempted"))
    assert decide(obs(ledger=plan.ledger, workload=requeued)).workload == "" and decide(obs(ledger=plan.ledger, workload=requeued)).create_pods == []
    again = obs(ledger=plan.ledger, workload=ADMITTED)
    resumed = decide(replace(again, probes={k: Probe() for k in needed_probes(again)}))
    assert resumed.create_pods == [("t0-r0", 1), ("t1-r0", 1)], "paused attempts go on, no attempt spent"


def test_an_evicted_run_suspends_its_running_job_and_releases_once_its_pod_is_gone():
    running = JobView("run-prepare", "prepare", 1, False, False, "", NOW)
    plan = decide(obs(samples=None, workload=EVICTED, jobs={"prepare": running}))
    assert plan.suspend_jobs == [("run-prepare", True)] and plan.workload == ""
    stopped = replace(running, active=0, suspended=True)
    assert decide(obs(samples=None, workload=EVICTED, jobs={"prepare": stopped})).workload == WORKLOAD_RELEASE


def test_a_run_that_ends_finishes_its_workload_also_when_it_was_settled_before():
    failing = obs(workload=ADMITTED, spec=spec(deadlineSeconds=60), status=GdpvalRunStatus(start_time=iso(NOW - 120)))
    plan = decide(failing)
    assert plan.state == "Failed" and plan.workload == WORKLOAD_FINISH
    settled = obs(workload=ADMITTED, status=GdpvalRunStatus(state="Succeeded"))
    assert decide(settled).workload == WORKLOAD_FINISH
    finished = workload(("Finished", "True", "Succeeded"))
    assert decide(replace(settled, workload=finished)).workload == ""


def test_a_workload_waiting_for_quota_is_resized_when_parallelism_or_start_ahead_change():
    grown = spec(parallelism=3, samples={"startAhead": 1})
    plan = decide(obs(samples=None, spec=grown, workload=PENDING))
    assert plan.workload == WORKLOAD_RESIZE and plan.state == "Suspended"
    ctx = m.RunContext("demo", "ns", "0123456789-uid", grown, "agent:1", "sandbox:1")
    patch = q.resize_patch(PENDING, q.workload_manifest(ctx, QUEUED))
    assert patch["metadata"] == {"resourceVersion": "7"}, "a Workload Kueue changed meanwhile is a Conflict, not overwritten"
    assert [ps["count"] for ps in patch["spec"]["podSets"]] == [4] and set(patch["spec"]) == {"podSets"}
    assert decide(obs(samples=None, spec=grown, workload=workload(("QuotaReserved", "False", "Pending"), pods=4))).workload == ""
    assert decide(obs(spec=grown, workload=ADMITTED)).workload == "", "a reserved Workload's podSets are immutable"


def test_an_admitted_run_keeps_to_the_sample_pods_kueue_admitted_and_says_so():
    grown = obs(spec=spec(parallelism=3, samples={"startAhead": 1}), workload=ADMITTED)
    plan = decide(grown)
    assert len(plan.create_pods) == 2, plan.create_pods
    assert "Kueue admitted 2 sample pods, fewer than parallelism + startAhead (4)" in plan.message
    assert "Kueue admitted" not in decide(obs(workload=ADMITTED)).message


def test_pods_ahead_come_after_the_window_within_the_admitted_pods():
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    going = (pod("t0-r0"), pod("t1-r0"))
    samples = (*SAMPLES, "t3-r0", "t4-r0")
    ahead = spec(samples={"startAhead": 2})
    three = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), admission=True, pods=3)
    assert decide(obs(spec=ahead, ledger=ledger, pods=going, samples=samples, workload=three)).create_pods == [("t2-r0", 1)]
    four = workload(("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"), admission=True, pods=4)
    assert decide(obs(spec=ahead, ledger=ledger, pods=going, samples=samples, workload=four)).create_pods == [("t2-r0", 1), ("t3-r0", 1)]

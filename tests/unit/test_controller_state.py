"""Ledger encoding and rebuild, pod/Job parsing, and status with conditions."""

from __future__ import annotations

import pytest

from gdpval.api.v1alpha1 import MAX_SECTORS, OTHER_SECTOR, Condition, GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.pure import ledger as lg
from gdpval.controller.pure.decide import decide
from gdpval.controller.pure.observe import parse_job, parse_pod
from gdpval.controller.pure.status import build_status, changed_pinned, pinned_hash, status_patch, transition_notes
from gdpval.controller.types import Blocker, Observed, Submission
from gdpval.storage.progress import progress_from_keys

NOW = 1_000_000.0


def test_entry_round_trip_and_reason_cleaning():
    e = lg.Entry(3, lg.Outcome.lost, pods=4, ended=12, input_tokens=5, output_tokens=6, api_errors=7, reason=lg.clean_reason("agent Error: exit 1"))
    assert lg.Entry.decode(e.encode()) == e and " " not in e.reason
    assert lg.decode(lg.encode({"a": e})) == {"a": e}
    assert lg.Entry.decode(lg.first_attempt().encode()) == lg.first_attempt()


def test_recreations_round_trip_and_old_entries_still_decode():
    e = lg.Entry(2, lg.Outcome.running, pods=5, recreated=2)
    assert e.encode() == "2 r 5 0 0 0 0 +2" and lg.Entry.decode(e.encode()) == e
    lost = e.finish(NOW, None, "PodLost")
    assert lg.Entry.decode(lost.encode()) == lost and lost.recreated == 2
    assert lg.Entry.decode("1 x 2 9 0 0 0 agent-Error-exit1") == lg.Entry(1, lg.Outcome.lost, 2, 9, reason="agent-Error-exit1")
    assert e.recreate().recreated == 3 and e.recreate().pods == 6 and e.start(3).recreated == 0


def test_finish_accumulates_tokens_over_attempts():
    e = lg.first_attempt().finish(10, lg.ResultSummary(False, "max_steps", 3, 4, 1))
    e = e.start(2).finish(20, lg.ResultSummary(True, "", 10, 20, 0))
    assert (e.outcome, e.attempt, e.input_tokens, e.output_tokens, e.api_errors, e.pods, e.reason) == (lg.Outcome.succeeded, 2, 13, 24, 1, 2, "")


def test_rebuild_from_s3_keys():
    keys = [
        "runs/r/samples/a-r0/attempt-1/result.json",
        "runs/r/samples/b-r0/attempt-1/result.json",
        "runs/r/samples/b-r0/attempt-2/transcript.jsonl",
        "runs/r/samples/c-r0/attempt-1/deliverable_files/x.txt",
    ]
    results = {("a-r0", 1): lg.ResultSummary(True, "", 1, 2), ("b-r0", 1): lg.ResultSummary(False, "max_steps")}
    ledger = lg.rebuild(progress_from_keys(keys), results, NOW)
    assert ledger["a-r0"].outcome == lg.Outcome.succeeded and ledger["a-r0"].input_tokens == 1
    assert ledger["b-r0"].attempt == 2 and ledger["b-r0"].outcome == lg.Outcome.running and ledger["b-r0"].pods == 2
    assert ledger["c-r0"] == lg.Entry(1, lg.Outcome.running, pods=1)


POD = {
    "metadata": {
        "name": "run-s-r0-a2",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"app.kubernetes.io/component": "sample", "gdpval.io/attempt": "2", "gdpval.io/sample": "s-r0"},
        "annotations": {"gdpval.io/sample-id": "s-r0"},
    },
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}],
        "initContainerStatuses": [{"name": "sandbox", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}],
    },
}


def test_parse_pod():
    p = parse_pod(POD)
    assert (p.sample, p.attempt, p.phase, p.component) == ("s-r0", 2, "Pending", "sample")
    assert p.waiting_reason == "ImagePullBackOff" and "sandbox" in p.waiting and p.unschedulable == "0/1 nodes"
    assert p.created == 1767225600.0 and not p.terminal


def test_parse_pod_reads_scheduling_gates_and_the_time_it_was_scheduled():
    gated = {**POD, "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}, "status": {"phase": "Pending"}}
    assert parse_pod(gated).gated == "kueue.x-k8s.io/admission" and parse_pod(POD).gated == ""
    condition = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    assert parse_pod({**POD, "status": {"phase": "Pending", "conditions": [condition]}}).gated == "SchedulingGated"
    bound = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:10:00Z"}
    p = parse_pod({**POD, "status": {"phase": "Pending", "conditions": [bound]}})
    assert p.scheduled == 1767225600.0 + 600 and p.pending_since == p.scheduled and parse_pod(POD).pending_since == 1767225600.0


def test_parse_failed_pod_keeps_the_termination_message():
    body = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "agent", "state": {"terminated": {"exitCode": 2, "reason": "Error", "message": "error: bucket missing\n"}}}],
        },
    }
    p = parse_pod(body)
    assert p.failure == "agent-Error-exit2" and p.message == "error: bucket missing" and p.terminal
    evicted = parse_pod({"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "DeadlineExceeded", "message": "too long"}})
    assert evicted.failure == "DeadlineExceeded"


def test_parse_pod_tells_a_disruption_from_a_failure():
    def failed(**status) -> bool:
        return parse_pod({"metadata": {"name": "p"}, "status": {"phase": "Failed", **status}}).disrupted

    condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert parse_pod({"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [condition]}}).disrupted
    assert failed(reason="Evicted", message="The node was low on resource: memory.")
    assert failed(reason="Preempted") and failed(reason="Terminated", message="Pod was terminated in response to imminent node shutdown.")
    assert not failed(reason="DeadlineExceeded") and not failed(conditions=[{**condition, "status": "False"}]) and not parse_pod(POD).disrupted
    kueue = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted", "message": "Preempted to accommodate a workload"}
    assert failed(conditions=[kueue]) and not failed(conditions=[{**kueue, "status": "False"}])


@pytest.mark.parametrize(
    "message",
    [
        'Usage of EmptyDir volume "workspace" exceeds the limit "64Mi". ',
        'Container sandbox exceeded its local ephemeral storage limit "300Mi". ',
        "Pod ephemeral local storage usage exceeds the total limit of containers 512Mi. ",
    ],
)
def test_an_eviction_for_the_pods_own_limits_is_its_failure_not_a_disruption(message):
    """The kubelet sets DisruptionTarget on these too; re-creating the pod for free would let a sample
    that fills its disk run again and again under one attempt."""
    condition = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    view = parse_pod({"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "Evicted", "message": message, "conditions": [condition]}})
    assert not view.disrupted and view.failure == "LimitExceeded" and view.message == message


def test_parse_job():
    j = parse_job(
        {
            "metadata": {"name": "j", "labels": {"app.kubernetes.io/component": "prepare"}},
            "status": {
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]
            },
        }
    )
    assert j.failed and not j.succeeded and "backoff limit" in j.message and j.component == "prepare"
    assert parse_job({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}).succeeded


def spec(**kw) -> GdpvalRunSpec:
    return GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://b/p"}, **kw})


def observed(**kw) -> Observed:
    base = dict(now=NOW, spec=spec(), generation=3, status=GdpvalRunStatus(), ledger={}, samples=("a-r0", "b-r0"), dataset_revision="rev1")
    base.update(kw)
    return Observed(**base)


def cond(status, type_):
    return next(c for c in status.conditions if c.type == type_)


def test_status_while_running():
    o = observed(ledger={"a-r0": lg.Entry(1, lg.Outcome.succeeded, input_tokens=7, output_tokens=8)})
    st = build_status(o, decide(o))
    assert st.state == "Running" and st.progress == "1/2" and st.observed_generation == 3
    assert st.samples.succeeded == 1 and st.samples.running == 1 and st.tokens.input == 7 and st.dataset_revision == "rev1"
    assert cond(st, "Ready").status == "False" and cond(st, "Ready").reason == "SamplesRunning"
    assert cond(st, "Prepared").status == "True" and cond(st, "Running").status == "True"
    assert cond(st, "Failed").reason == "NoFailure" and cond(st, "Suspended").status == "False"
    assert cond(st, "Stalled").status == "False"
    assert all(c.observed_generation == 3 for c in st.conditions)
    patch = status_patch(st)
    assert patch["samples"]["total"] == 2 and "submissionURI" not in patch and "modelAPIErrors" in patch


def test_status_before_prepare_has_no_progress():
    st = build_status(observed(samples=None), decide(observed(samples=None)))
    assert st.progress == "" and st.state == "Preparing" and cond(st, "Prepared").reason == "Preparing"


def test_status_succeeded_with_submission():
    from gdpval.controller.pure.observe import JobView

    ledger = {s: lg.Entry(1, lg.Outcome.succeeded) for s in ("a-r0", "b-r0")}
    jobs = {"assemble": JobView("j", "assemble", 0, True, False, "", NOW)}
    submission = Submission("s3://b/p/runs/x/submission", 0.5, 0.25, "s3://b/p/runs/x/report.html", grading_ready_rate=0.5, grading_text_only=True)
    o = observed(ledger=ledger, jobs=jobs, submission=submission)
    st = build_status(o, decide(o))
    assert st.report_uri == "s3://b/p/runs/x/report.html" and (st.grading_ready_rate, st.grading_text_only) == (0.5, True)
    assert st.state == "Succeeded" and cond(st, "Ready").status == "True" and cond(st, "Succeeded").reason == "SubmissionReady"
    assert st.submission_uri == "s3://b/p/runs/x/submission" and (st.submission_ready_rate, st.completed_rate) == (0.5, 0.25) and st.completion_time
    assert transition_notes(GdpvalRunStatus(state="Assembling"), st)[0].reason == "Succeeded"


def test_blocked_status_names_the_fix():
    o = observed(blockers=(Blocker("SecretNotFound", "secret 'openai' not found in namespace ns: create it"),))
    st = build_status(o, decide(o))
    assert st.state == "Blocked" and cond(st, "Ready").reason == "SecretNotFound" and "create it" in cond(st, "Ready").message
    notes = transition_notes(GdpvalRunStatus(state="Running"), st)
    assert notes[0].warning and notes[0].reason == "SecretNotFound"


def test_transition_time_kept_while_status_unchanged():
    o = observed()
    first = build_status(o, decide(o))
    later = observed(now=NOW + 100, status=first)
    second = build_status(later, decide(later))
    assert cond(second, "Running").last_transition_time == cond(first, "Running").last_transition_time
    assert second.start_time == first.start_time


def test_pinned_changes_are_refused_by_name():
    before = pinned_hash(spec())
    after = pinned_hash(spec(model={"name": "other"}))
    assert changed_pinned(before, after) == ["spec.model"] and changed_pinned(before, before) == []
    prev = GdpvalRunStatus(pinned_spec_hash=before, conditions=[Condition(type="Ready", status="False", reason="x")])
    o = observed(spec=spec(model={"name": "other"}), status=prev)
    st = build_status(o, decide(o))
    assert cond(st, "Ready").reason == "SpecChangeRefused" and "spec.model" in cond(st, "Ready").message
    assert st.pinned_spec_hash == before


def test_parallelism_is_not_pinned():
    assert pinned_hash(spec(parallelism=9, suspend=True, failureBudget=3)) == pinned_hash(spec())


def test_finished_is_true_on_success_and_on_failure():
    """`kubectl wait --for=condition=Finished` returns either way; it is False while the run goes on."""
    from gdpval.controller.pure.observe import JobView

    running = observed()
    assert cond(build_status(running, decide(running)), "Finished").status == "False"
    ledger = {s: lg.Entry(1, lg.Outcome.succeeded) for s in ("a-r0", "b-r0")}
    jobs = {"assemble": JobView("j", "assemble", 0, True, False, "", NOW)}
    done = observed(ledger=ledger, jobs=jobs, submission=Submission("s3://b/p/sub", 1.0, 1.0))
    finished = cond(build_status(done, decide(done)), "Finished")
    assert (finished.status, finished.reason) == ("True", "SubmissionReady")
    failed_ledger = {s: lg.Entry(3, lg.Outcome.failed, reason="max_steps") for s in ("a-r0", "b-r0")}
    failing = observed(ledger=failed_ledger, spec=spec(failureBudget=0))
    finished = cond(build_status(failing, decide(failing)), "Finished")
    assert (finished.status, finished.reason) == ("True", "FailureBudgetExceeded") and "failure budget" in finished.message


def test_sector_counts_are_bounded():
    samples = tuple(f"s{i}-r0" for i in range(40))
    sectors = {s: f"Sector {i % 35}" for i, s in enumerate(samples)}
    ledger = {"s0-r0": lg.Entry(1, lg.Outcome.succeeded), "s1-r0": lg.Entry(3, lg.Outcome.failed, reason="x")}
    o = observed(samples=samples, sectors=sectors, ledger=ledger, spec=spec(failureBudget=5))
    st = build_status(o, decide(o))
    assert len(st.sectors) == MAX_SECTORS + 1 and sum(c.total for c in st.sectors.values()) == 40
    assert st.sectors["Sector 0"].model_dump() == {"total": 2, "succeeded": 1, "failed": 0}
    assert st.sectors["Sector 1"].failed == 1 and st.sectors[OTHER_SECTOR].total == 40 - 32 - (40 - 35)
    assert status_patch(st)["sectors"]["Sector 0"] == {"total": 2, "succeeded": 1, "failed": 0}


def test_suspended_time_is_added_when_the_suspension_ends():
    o = observed(spec=spec(suspend=True))
    suspended = build_status(o, decide(o))
    assert cond(suspended, "Suspended").status == "True" and "deadlineSeconds is paused" in cond(suspended, "Suspended").message
    o = observed(status=suspended, now=NOW + 100.0, spec=spec(suspend=True))
    still = build_status(o, decide(o))
    assert still.suspended_seconds == 0, "a suspension going on is counted from its condition, not added twice"
    o = observed(status=still, now=NOW + 250.0)
    resumed = build_status(o, decide(o))
    assert resumed.suspended_seconds == 250 and cond(resumed, "Suspended").status == "False"

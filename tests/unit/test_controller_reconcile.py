"""The reconcile decision, pass by pass, including crashes between any two effects."""

from __future__ import annotations

import random
from dataclasses import replace

from gdpval.api.v1alpha1 import Condition, GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide import decide, needed_probes
from gdpval.controller.pure.ledger import Entry, Outcome, ResultSummary
from gdpval.controller.pure.observe import JobView, PodView, iso
from gdpval.controller.pure.policy import MAX_CREATES_PER_PASS, MAX_RECREATIONS
from gdpval.controller.types import Blocker, Observed, Probe, Submission

NOW = 1_000_000.0
SAMPLES = tuple(f"t{i}-r0" for i in range(6))


def spec(**kw) -> GdpvalRunSpec:
    base = {"model": {"name": "m"}, "output": {"url": "s3://b/p"}, "parallelism": 2, "samples": {"retries": 1, "backoffSeconds": 10}}
    base.update(kw)
    return GdpvalRunSpec.model_validate(base)


def obs(**kw) -> Observed:
    base = dict(now=NOW, spec=spec(), generation=1, status=GdpvalRunStatus(), ledger={}, samples=SAMPLES)
    base.update(kw)
    return Observed(**base)


def pod(sample, attempt=1, phase="Running", created=NOW - 5, **kw) -> PodView:
    return PodView(
        name=n.sample_pod_name("run", sample, attempt), component="sample", sample=sample, attempt=attempt, phase=phase, deleting=False, created=created, **kw
    )


def job(component, succeeded=False, failed=False, active=0) -> JobView:
    return JobView(f"run-{component}", component, active, succeeded, failed, "BackoffLimitExceeded" if failed else "", NOW)


OK = ResultSummary(succeeded=True, input_tokens=10, output_tokens=5, api_errors=1)
BAD = ResultSummary(succeeded=False, reason="max_steps")


def test_prepare_job_first_then_waits():
    plan = decide(obs(samples=None))
    assert plan.create_jobs == ["prepare"] and plan.state == "Preparing" and not plan.create_pods
    plan = decide(obs(samples=None, jobs={"prepare": job("prepare", active=1)}))
    assert plan.create_jobs == [] and plan.state == "Preparing"


def test_prepare_failure_fails_the_run_with_the_pod_message():
    failed_pod = PodView("run-prepare-x", "prepare", "", 0, "Failed", False, NOW, failure="prepare-Error-exit2", message="error: no such dataset")
    plan = decide(obs(samples=None, jobs={"prepare": job("prepare", failed=True)}, pods=(failed_pod,)))
    assert plan.state == "Failed" and plan.reason == "PrepareFailed" and "no such dataset" in plan.message


def test_window_starts_parallelism_pods_in_manifest_order():
    plan = decide(obs())
    assert plan.create_pods == [("t0-r0", 1), ("t1-r0", 1)]
    assert plan.ledger["t0-r0"].outcome == Outcome.running and plan.state == "Running"
    assert plan.network_policy


def test_window_counts_live_pods():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(ledger=ledger, pods=(pod("t0-r0"),)))
    assert plan.create_pods == [("t1-r0", 1)]


def test_finished_pod_is_recorded_then_deleted():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    done = pod("t0-r0", phase="Succeeded")
    o = obs(ledger=ledger, pods=(done,))
    assert needed_probes(o) == [("t0-r0", 1)]
    plan = decide(replace(o, probes={("t0-r0", 1): Probe(committed=OK)}))
    assert plan.ledger["t0-r0"].outcome == Outcome.succeeded and plan.ledger["t0-r0"].input_tokens == 10
    assert plan.delete_pods == [done.name]
    assert plan.tally.succeeded == 1 and plan.tally.input_tokens == 10 and plan.tally.api_errors == 1


def test_without_probe_nothing_is_decided():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(ledger=ledger, pods=(pod("t0-r0", phase="Succeeded"),)))
    assert plan.ledger["t0-r0"].outcome == Outcome.running and plan.delete_pods == []


def test_exit_zero_without_result_is_a_lost_attempt():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    done = pod("t0-r0", phase="Succeeded")
    plan = decide(obs(ledger=ledger, pods=(done,), probes={("t0-r0", 1): Probe()}))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost and plan.ledger["t0-r0"].reason == "NoResult"


def test_retry_after_backoff_with_next_attempt_number():
    ledger = {"t0-r0": Entry(1, Outcome.failed, ended=int(NOW) - 5, reason="max_steps")}
    plan = decide(obs(ledger=ledger, spec=spec(parallelism=1)))
    assert ("t0-r0", 2) not in plan.create_pods and plan.create_pods == [("t1-r0", 1)]
    assert plan.requeue_after(NOW) <= 5
    plan = decide(obs(ledger=ledger, now=NOW + 6, spec=spec(parallelism=1)))
    assert plan.create_pods == [("t0-r0", 2)] and plan.ledger["t0-r0"].pods == 2


def test_retries_exhausted_count_as_failed_within_budget():
    ledger = {"t0-r0": Entry(2, Outcome.failed, ended=int(NOW), reason="max_steps")}
    plan = decide(obs(ledger=ledger, spec=spec(failureBudget=1)))
    assert plan.tally.failed == 1 and plan.state == "Running"
    assert all(s != "t0-r0" for s, _ in plan.create_pods)


def test_out_of_retries_posts_sample_failed():
    ledger = {"t0-r0": Entry(2, Outcome.running, pods=2)}
    plan = decide(obs(ledger=ledger, pods=(pod("t0-r0", 2, phase="Succeeded"),), probes={("t0-r0", 2): Probe(committed=BAD)}, spec=spec(failureBudget=5)))
    assert [n.reason for n in plan.notes] == ["SampleFailed"] and "max_steps" in plan.notes[0].message


def test_prepare_pod_not_starting_is_reported():
    stuck = PodView("run-prepare-x", "prepare", "", 0, "Pending", False, NOW, waiting="ErrImagePull (prepare): not found", waiting_reason="ErrImagePull")
    plan = decide(obs(samples=None, jobs={"prepare": job("prepare", active=1)}, pods=(stuck,)))
    assert plan.reason == "PodsNotStarting" and "ErrImagePull" in plan.message


def test_failure_budget_exceeded_fails_and_stops_pods():
    ledger = {s: Entry(2, Outcome.lost, ended=int(NOW), reason="PodFailed") for s in SAMPLES[:2]}
    ledger["t2-r0"] = Entry(1, Outcome.running)
    live = pod("t2-r0")
    plan = decide(obs(ledger=ledger, pods=(live,), spec=spec(failureBudget=1)))
    assert plan.state == "Failed" and plan.reason == "FailureBudgetExceeded"
    assert "2 failed samples (2 PodFailed)" in plan.message and plan.delete_pods == [live.name] and not plan.create_pods


def test_suspend_stops_active_pods_and_resume_starts_the_same_attempts():
    """As a Job's suspend: live pods go and their attempts are paused, not spent; a pod that already ended is recorded."""
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(2, Outcome.running, pods=2, recreated=1), "t2-r0": Entry(1, Outcome.running)}
    live, done = (pod("t0-r0"), pod("t1-r0", attempt=2)), pod("t2-r0", phase="Succeeded")
    o = obs(ledger=ledger, pods=(*live, done), spec=spec(suspend=True), probes={("t2-r0", 1): Probe(committed=OK)})
    assert needed_probes(o) == [("t2-r0", 1)]
    plan = decide(o)
    assert plan.create_pods == [] and sorted(plan.delete_pods) == sorted(p.name for p in (*live, done)) and plan.state == "Suspended"
    assert {s: e.outcome for s, e in plan.ledger.items()} == {"t0-r0": Outcome.paused, "t1-r0": Outcome.paused, "t2-r0": Outcome.succeeded}
    assert plan.tally.running == 0 and plan.tally.pending == 5 and plan.tally.succeeded == 1
    suspended = obs(ledger=plan.ledger, spec=spec(suspend=True))
    assert needed_probes(suspended) == [] and decide(suspended).create_pods == [], "nothing is read or started while suspended"
    resumed = obs(ledger=plan.ledger)
    assert needed_probes(resumed) == [("t0-r0", 1), ("t1-r0", 2)]
    plan = decide(replace(resumed, probes={("t0-r0", 1): Probe(), ("t1-r0", 2): Probe(committed=OK)}))
    assert plan.create_pods == [("t0-r0", 1), ("t3-r0", 1)], "the paused attempt starts again, and the window fills"
    assert plan.ledger["t0-r0"] == Entry(1, Outcome.running, pods=2) and plan.ledger["t1-r0"].outcome == Outcome.succeeded


def test_suspend_reaches_a_running_job_and_leaves_finished_ones():
    running = job("prepare", active=1)
    plan = decide(obs(samples=None, jobs={"prepare": running}, spec=spec(suspend=True)))
    assert plan.suspend_jobs == [(running.name, True)] and plan.state == "Suspended" and "prepare Job" in plan.message
    stopped = replace(running, active=0, suspended=True)
    assert decide(obs(samples=None, jobs={"prepare": stopped}, spec=spec(suspend=True))).suspend_jobs == []
    resumed = decide(obs(samples=None, jobs={"prepare": stopped}))
    assert resumed.suspend_jobs == [(running.name, False)] and resumed.state == "Preparing"
    done = {s: Entry(1, Outcome.succeeded, ended=int(NOW)) for s in SAMPLES}
    assert decide(obs(ledger=done, jobs={"assemble": job("assemble", succeeded=True)}, spec=spec(suspend=True))).suspend_jobs == []


def test_a_resumed_run_restarts_a_bounded_number_of_paused_samples_a_pass():
    many = tuple(f"s{i:03d}-r0" for i in range(120))
    paused = {s: Entry(1, Outcome.paused) for s in many}
    o = obs(samples=many, ledger=paused, spec=spec(parallelism=120))
    wanted = needed_probes(o)
    assert len(wanted) == MAX_CREATES_PER_PASS, "probes, then pods, for one pass's share of the paused samples"
    plan = decide(replace(o, probes={w: Probe() for w in wanted}))
    assert plan.create_pods == wanted and plan.requeue_after(NOW) == 1.0, "the rest in the next passes"


def test_a_pass_creates_a_bounded_number_of_pods():
    many = tuple(f"s{i}-r0" for i in range(500))
    plan = decide(obs(samples=many, spec=spec(parallelism=300)))
    assert len(plan.create_pods) == MAX_CREATES_PER_PASS and plan.requeue_after(NOW) == 1.0, "the rest of the window comes in the next pass"
    plan = decide(obs(samples=many, spec=spec(parallelism=300), ledger=plan.ledger))
    assert len(plan.create_pods) == MAX_CREATES_PER_PASS and len(plan.ledger) == 2 * MAX_CREATES_PER_PASS


def test_suspend_before_prepare_creates_no_job():
    plan = decide(obs(samples=None, spec=spec(suspend=True)))
    assert plan.create_jobs == [] and plan.state == "Suspended"


def test_blockers_stop_new_children():
    blocked = (Blocker("SecretNotFound", "secret openai not found"),)
    assert decide(obs(blockers=blocked)).create_pods == []
    assert decide(obs(samples=None, blockers=blocked)).create_jobs == []


def test_parallelism_change_applies_next_pass():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(ledger=ledger, pods=(pod("t0-r0"),), spec=spec(parallelism=4)))
    assert len(plan.create_pods) == 3


def test_stuck_pending_pod_is_replaced_and_counted():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    stuck = pod("t0-r0", phase="Pending", created=NOW - 700, waiting_reason="ImagePullBackOff", waiting="ImagePullBackOff (sandbox): not found")
    plan = decide(obs(ledger=ledger, pods=(stuck,)))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost and plan.ledger["t0-r0"].reason == "ImagePullBackOff"
    assert plan.delete_pods == [stuck.name] and any(note.reason == "PodStuck" for note in plan.notes)


def test_pending_timeout_counts_from_scheduling_and_never_fails_a_gated_pod():
    samples = ("t0-r0", "t1-r0", "t2-r0")
    ledger = {s: Entry(1, Outcome.running) for s in samples}
    pulling = pod("t0-r0", phase="Pending", created=NOW - 3000, scheduled=NOW - 100, waiting_reason="ImagePullBackOff", waiting="ImagePullBackOff (sandbox)")
    gated = pod("t1-r0", phase="Pending", created=NOW - 90_000, gated="kueue.x-k8s.io/admission")
    unschedulable = pod("t2-r0", phase="Pending", created=NOW - 700, unschedulable="0/3 nodes are available")
    plan = decide(obs(ledger=ledger, samples=samples, spec=spec(parallelism=3), pods=(pulling, gated, unschedulable)))
    assert plan.delete_pods == [unschedulable.name] and plan.ledger["t2-r0"].reason == "Unschedulable"
    assert plan.ledger["t0-r0"].outcome == plan.ledger["t1-r0"].outcome == Outcome.running
    assert NOW + 500 in plan.wake_at, "the pulling pod is looked at again when its time from scheduling is up"
    assert f"{gated.name}: waiting for admission (scheduling gates: kueue.x-k8s.io/admission)" in plan.waiting
    plan = decide(obs(ledger=ledger, samples=samples, spec=spec(parallelism=3), pods=(replace(pulling, scheduled=NOW - 600), gated)))
    assert plan.delete_pods == [pulling.name] and plan.ledger["t0-r0"].reason == "ImagePullBackOff"


def test_invalid_image_is_stuck_at_once_and_young_pull_errors_are_reported():
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    bad = pod("t0-r0", phase="Pending", waiting_reason="InvalidImageName", waiting="InvalidImageName (agent)")
    slow = pod("t1-r0", phase="Pending", waiting_reason="ImagePullBackOff", waiting="ImagePullBackOff (agent)")
    plan = decide(obs(ledger=ledger, pods=(bad, slow)))
    assert plan.delete_pods == [bad.name] and plan.reason == "PodsNotStarting"
    assert any("ImagePullBackOff" in w for w in plan.waiting)


def test_vanished_pod_without_files_is_restarted_under_the_same_attempt():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    o = obs(ledger=ledger, spec=spec(parallelism=1))
    assert needed_probes(o) == [("t0-r0", 1)]
    plan = decide(replace(o, probes={("t0-r0", 1): Probe()}))
    assert plan.create_pods == [("t0-r0", 1)] and plan.ledger["t0-r0"].pods == 2 and plan.tally.retried == 1


def test_a_pod_that_keeps_vanishing_costs_its_attempt_after_the_cap():
    o = obs(ledger={"t0-r0": Entry(1, Outcome.running)}, samples=("t0-r0",), probes={("t0-r0", 1): Probe()})
    for recreated in range(1, MAX_RECREATIONS + 1):
        plan = decide(o)
        assert plan.create_pods == [("t0-r0", 1)] and plan.ledger["t0-r0"].recreated == recreated
        o = replace(o, ledger=plan.ledger)
    plan = decide(o)
    entry = plan.ledger["t0-r0"]
    assert (entry.outcome, entry.reason, entry.attempt) == (Outcome.lost, "PodLost", 1) and plan.create_pods == []
    assert [note.reason for note in plan.notes] == ["AttemptLost"]
    plan = decide(replace(o, ledger=plan.ledger, now=NOW + 10, probes={}))
    assert plan.create_pods == [("t0-r0", 2)] and plan.ledger["t0-r0"].recreated == 0


def test_a_preempted_pod_is_recreated_under_the_same_attempt():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    preempted = pod("t0-r0", phase="Failed", failure="agent-Error-exit137", disrupted=True)
    o = obs(ledger=ledger, spec=spec(parallelism=1), pods=(preempted,))
    assert needed_probes(o) == [("t0-r0", 1)]
    plan = decide(replace(o, probes={("t0-r0", 1): Probe()}))
    assert plan.ledger == ledger and plan.delete_pods == [preempted.name] and plan.create_pods == []
    assert [note.reason for note in plan.notes] == ["PodDisrupted"]
    plan = decide(replace(o, pods=(), probes={("t0-r0", 1): Probe()}))
    assert plan.create_pods == [("t0-r0", 1)] and plan.ledger["t0-r0"].attempt == 1 and plan.ledger["t0-r0"].recreated == 1
    # Disrupted mid-upload: the attempt's folder is not clean, so it ends like any lost attempt.
    plan = decide(replace(o, probes={("t0-r0", 1): Probe(has_files=True)}))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost and plan.delete_pods == [preempted.name]


def test_an_entry_waiting_out_a_refused_create_is_not_probed():
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    o = obs(ledger=ledger, create_failures={"t0-r0": (NOW - 10, "exceeded quota")})
    assert needed_probes(o) == [("t1-r0", 1)]
    plan = decide(o)
    assert plan.create_pods == [] and plan.wake_at == [NOW + 20] and plan.waiting == ["t0-r0: pod creation failed: exceeded quota"]
    assert needed_probes(replace(o, now=NOW + 20)) == [("t0-r0", 1), ("t1-r0", 1)]


def test_vanished_pod_with_files_is_lost_and_with_result_committed():
    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    probes = {("t0-r0", 1): Probe(has_files=True), ("t1-r0", 1): Probe(committed=OK, has_files=True)}
    plan = decide(obs(ledger=ledger, probes=probes, spec=spec(parallelism=1)))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost and plan.ledger["t0-r0"].reason == "PodLost"
    assert plan.ledger["t1-r0"].outcome == Outcome.succeeded


def test_index_lag_is_not_mistaken_for_a_lost_pod():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(ledger=ledger, probes={("t0-r0", 1): Probe(has_files=True, pod_exists=True)}))
    assert plan.ledger["t0-r0"].outcome == Outcome.running and ("t0-r0", 1) not in plan.create_pods


def test_unknown_pod_is_adopted_and_duplicate_deleted():
    newer = pod("t0-r0", attempt=3)
    plan = decide(obs(ledger={"t0-r0": Entry(2, Outcome.lost, pods=2, ended=int(NOW))}, pods=(newer,)))
    assert plan.ledger["t0-r0"] == Entry(3, Outcome.running, pods=3)
    old_live = pod("t1-r0", attempt=1)
    plan = decide(obs(ledger={"t1-r0": Entry(2, Outcome.running, pods=2)}, pods=(old_live, pod("t1-r0", attempt=2))))
    assert plan.delete_pods == [old_live.name]


def test_cleanup_policy_keeps_failed_pods():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    failed = pod("t0-r0", phase="Failed", failure="agent-Error-exit1")
    plan = decide(obs(ledger=ledger, pods=(failed,), probes={("t0-r0", 1): Probe()}, spec=spec(cleanupPolicy="KeepFailed")))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost and plan.delete_pods == []
    plan = decide(obs(ledger=plan.ledger, pods=(failed,), spec=spec(cleanupPolicy="KeepFailed")))
    assert plan.delete_pods == [] and ("t0-r0", 2) not in plan.create_pods


def test_all_done_assembles_then_succeeds():
    ledger = {s: Entry(1, Outcome.succeeded, ended=int(NOW)) for s in SAMPLES}
    plan = decide(obs(ledger=ledger))
    assert plan.create_jobs == ["assemble"] and plan.state == "Assembling"
    jobs = {"assemble": job("assemble", succeeded=True), "prepare": job("prepare", succeeded=True)}
    plan = decide(obs(ledger=ledger, jobs=jobs, submission=Submission("s3://b/p/runs/run/submission", 1.0)))
    assert plan.state == "Succeeded" and "s3://b/p/runs/run/submission" in plan.message
    assert sorted(plan.delete_jobs) == ["run-assemble", "run-prepare"]


def test_assemble_failure_fails_the_run():
    ledger = {s: Entry(1, Outcome.succeeded, ended=int(NOW)) for s in SAMPLES}
    plan = decide(obs(ledger=ledger, jobs={"assemble": job("assemble", failed=True)}))
    assert plan.state == "Failed" and plan.reason == "AssembleFailed"


def test_run_deadline():
    status = GdpvalRunStatus(start_time="1970-01-12T13:30:00Z", state="Running")
    plan = decide(obs(status=status, spec=spec(deadlineSeconds=60), pods=(pod("t0-r0"),), ledger={"t0-r0": Entry(1, Outcome.running)}))
    assert plan.state == "Failed" and plan.reason == "DeadlineExceeded" and plan.delete_pods


def test_the_deadline_is_paused_while_suspended():
    """The run started 100 s before NOW with a 60 s deadline, but spent 80 s suspended: 20 s remain."""
    started = GdpvalRunStatus(start_time=iso(NOW - 100), state="Running", suspended_seconds=80)
    running = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(status=started, spec=spec(deadlineSeconds=60), pods=(pod("t0-r0"),), ledger=running))
    assert plan.state == "Running" and min(plan.wake_at) == NOW + 40
    suspended = started.model_copy(update={"conditions": [Condition(type="Suspended", status="True", reason="SuspendedByUser", last_transition_time=iso(NOW))]})
    plan = decide(obs(now=NOW + 3600, status=suspended, spec=spec(deadlineSeconds=60, suspend=True), ledger={}))
    assert plan.state == "Suspended", "a suspended run's deadline does not run out"
    resumed = suspended.model_copy(update={"conditions": [], "suspended_seconds": 80 + 3600})
    assert decide(obs(now=NOW + 3600, status=resumed, spec=spec(deadlineSeconds=60))).state == "Running"
    assert decide(obs(now=NOW + 3600 + 40, status=resumed, spec=spec(deadlineSeconds=60))).reason == "DeadlineExceeded"


def test_a_finished_run_is_deleted_after_its_ttl():
    done = GdpvalRunStatus(state="Succeeded", completion_time=iso(NOW - 30))
    plan = decide(obs(status=done, spec=spec(ttlSecondsAfterFinished=100)))
    assert not plan.delete_run and plan.wake_at == [NOW + 70]
    assert decide(obs(status=done, spec=spec(ttlSecondsAfterFinished=30))).delete_run
    assert not decide(obs(status=done)).delete_run, "without a TTL a finished run stays"
    assert not decide(obs(status=GdpvalRunStatus(state="Running"), spec=spec(ttlSecondsAfterFinished=0))).delete_run


def test_finished_run_only_tidies_up():
    status = GdpvalRunStatus(state="Succeeded")
    straggler = pod("t0-r0", attempt=1)
    plan = decide(obs(status=status, pods=(straggler,)))
    assert plan.create_pods == [] and plan.create_jobs == [] and plan.delete_pods == [straggler.name] and plan.state == "Succeeded"


# --- a simulated cluster with crashes between effects -------------------------------------------


class World:
    """Pods, S3 and the ledger ConfigMap; pods run to completion and sometimes fail or vanish."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.pods: dict[str, PodView] = {}
        self.ledger: dict = {}
        self.results: dict[tuple[str, int], ResultSummary] = {}
        self.files: set[tuple[str, int]] = set()
        self.commits: dict[str, list[int]] = {}
        self.now = NOW

    def observe(self, s: GdpvalRunSpec) -> Observed:
        base = obs(now=self.now, spec=s, ledger=dict(self.ledger), pods=tuple(self.pods.values()))
        probes = {
            key: Probe(self.results.get(key), key in self.files, any((p.sample, p.attempt) == key for p in self.pods.values())) for key in needed_probes(base)
        }
        return replace(base, probes=probes)

    def apply(self, plan, crash_at: int | None) -> None:
        steps = [lambda: self.ledger.update(plan.ledger) or self.ledger.__init__(plan.ledger)]
        steps += [lambda name=name: self.pods.pop(name, None) for name in plan.delete_pods]
        steps += [lambda s=s, a=a: self.create(s, a) for s, a in plan.create_pods]
        for i, step in enumerate(steps):
            if crash_at is not None and i == crash_at:
                return
            step()

    def create(self, sample: str, attempt: int) -> None:
        live = [p for p in self.pods.values() if p.sample == sample and not p.terminal]
        assert not live, f"second live pod for {sample}"
        assert not any(self.results[(sample, a)].succeeded for a in self.commits.get(sample, [])), f"{sample} re-run after success"
        p = pod(sample, attempt, created=self.now)
        self.pods.setdefault(p.name, p)

    def tick(self) -> None:
        self.now += 7
        for name, p in list(self.pods.items()):
            if p.terminal:
                continue
            roll = self.rng.random()
            key = (p.sample, p.attempt)
            if roll < 0.08:  # deleted by someone, maybe after uploading a few files
                if self.rng.random() < 0.5:
                    self.files.add(key)
                del self.pods[name]
            elif roll < 0.5:
                self.files.add(key)
                ok = self.rng.random() < 0.7
                if self.rng.random() < 0.85:
                    assert key not in self.results, f"{key} committed twice"
                    self.results[key] = OK if ok else BAD
                    self.commits.setdefault(p.sample, []).append(p.attempt)
                self.pods[name] = replace(p, phase="Succeeded")


def test_simulated_runs_with_crashes_never_double_commit_or_orphan():
    for seed in range(40):
        rng = random.Random(seed)
        world = World(rng)
        s = spec(parallelism=3, samples={"retries": 2, "backoffSeconds": 0}, failureBudget="100%")
        for _ in range(400):
            o = world.observe(s)
            plan = decide(o)
            if plan.state == "Assembling" and not plan.create_pods and not [p for p in world.pods.values() if not p.terminal]:
                break
            crash = rng.randrange(6) if rng.random() < 0.3 else None
            world.apply(plan, crash)
            live = [p for p in world.pods.values() if not p.terminal]
            assert len(live) <= s.parallelism
            world.tick()
        else:
            raise AssertionError(f"seed {seed}: run did not finish")
        final = decide(world.observe(s))
        assert final.tally.done == len(SAMPLES), seed
        for sample, attempts in world.commits.items():
            successes = [a for a in attempts if world.results[(sample, a)].succeeded]
            assert len(successes) <= 1, (seed, sample)


def test_a_spent_run_budget_starts_no_pod_and_a_raised_one_starts_them_again():
    from gdpval.controller.pure.status import build_status

    ended = Entry(1, Outcome.succeeded, ended=int(NOW - 1), input_tokens=900, output_tokens=200)
    prices = {"input": 2.0, "output": 8.0}
    tight = obs(ledger={"t0-r0": ended}, spec=spec(budget={"runTokens": 1000, "prices": prices}))
    plan = decide(tight)
    assert plan.create_pods == [] and plan.state == "Running" and plan.reason == "BudgetExhausted"
    assert "1,000 tokens" in plan.budget and "raise spec.budget" in plan.message
    status = build_status(tight, plan)
    budget = next(c for c in status.conditions if c.type == "BudgetExhausted")
    assert budget.status == "True" and budget.reason == "RunBudgetSpent"
    assert status.tokens.cost == round((900 * 2 + 200 * 8) / 1e6, 6)
    raised = decide(obs(ledger={"t0-r0": ended}, spec=spec(budget={"runTokens": 5000, "prices": prices})))
    assert raised.create_pods == [("t1-r0", 1), ("t2-r0", 1)] and not raised.budget
    assert next(c for c in build_status(tight, raised).conditions if c.type == "BudgetExhausted").status == "False"


def _outage_pod(sample: str, attempt: int = 1) -> PodView:
    return pod(sample, attempt, phase="Failed", failure="agent-Error-exit75", exit_code=75, model_unavailable=True)


def test_a_pod_the_outage_ended_holds_its_attempt_and_no_new_pod_starts():
    from gdpval.controller.pure.status import build_status

    ledger = {"t0-r0": Entry(1, Outcome.running), "t1-r0": Entry(1, Outcome.running)}
    ended = _outage_pod("t0-r0")
    plan = decide(obs(ledger=ledger, pods=(ended, pod("t1-r0")), probes={("t0-r0", 1): Probe()}))
    held = plan.ledger["t0-r0"]
    assert held.outcome == Outcome.held and held.attempt == 1 and held.reason == "ModelUnavailable"
    assert plan.delete_pods == [ended.name] and plan.create_pods == []  # a free slot, yet no new sample
    assert plan.reason == "ModelUnavailable" and plan.tally.failed == 0 and plan.tally.pending == 5
    condition = next(c for c in build_status(obs(ledger=ledger), plan).conditions if c.type == "ModelUnavailable")
    assert condition.status == "True" and "no attempt spent" in condition.message


def test_an_outage_pod_that_committed_something_is_not_held():
    ledger = {"t0-r0": Entry(1, Outcome.running)}
    plan = decide(obs(ledger=ledger, pods=(_outage_pod("t0-r0"),), probes={("t0-r0", 1): Probe(has_files=True)}))
    assert plan.ledger["t0-r0"].outcome == Outcome.lost


def test_held_attempts_send_one_probe_pod_at_a_time_after_the_probe_delay():
    from gdpval.controller.pure.policy import OUTAGE_PROBE_SECONDS

    held = {s: Entry(1, Outcome.running).hold(NOW - 5) for s in SAMPLES[:2]}
    early = decide(obs(ledger=held))
    assert early.create_pods == [] and min(early.wake_at) == NOW - 5 + OUTAGE_PROBE_SECONDS
    probing = decide(obs(now=NOW + OUTAGE_PROBE_SECONDS, ledger=held))
    assert probing.create_pods == [("t0-r0", 1)] and probing.ledger["t0-r0"].outcome == Outcome.running
    assert probing.reason == "ModelUnavailable"
    again = decide(obs(now=NOW + 2 * OUTAGE_PROBE_SECONDS, ledger=probing.ledger, pods=(pod("t0-r0"),)))
    assert again.create_pods == []  # the probe runs: nothing else starts


def test_an_answer_after_the_holds_resumes_them_under_their_own_attempt():
    from gdpval.controller.pure.status import build_status

    held = {s: Entry(1, Outcome.running).hold(NOW - 50) for s in SAMPLES[:2]}
    probe = held["t0-r0"].resume()
    done = pod("t0-r0", phase="Succeeded")
    plan = decide(obs(ledger=held | {"t0-r0": probe}, pods=(done,), probes={("t0-r0", 1): Probe(committed=OK)}))
    assert plan.ledger["t0-r0"].outcome == Outcome.succeeded and plan.ledger["t0-r0"].attempt == 1
    assert plan.create_pods == [("t1-r0", 1), ("t2-r0", 1)]  # the held one first, under attempt 1, then the window refills
    assert plan.ledger["t1-r0"].outcome == Outcome.running and not plan.outage and plan.reason == "SamplesRunning"
    condition = next(c for c in build_status(obs(), plan).conditions if c.type == "ModelUnavailable")
    assert condition.status == "False"


def test_a_failure_of_the_endpoint_is_no_answer():
    held = {"t1-r0": Entry(1, Outcome.running).hold(NOW - 5)}
    outage_failure = Entry(1, Outcome.failed, ended=int(NOW - 20), reason="connection")  # its retry is due, yet waits
    plan = decide(obs(ledger=held | {"t0-r0": outage_failure}))
    assert plan.ledger["t1-r0"].outcome == Outcome.held and plan.create_pods == [] and plan.reason == "ModelUnavailable"


def test_the_last_hold_probing_keeps_the_window_shut_until_it_is_heard_from():
    from gdpval.controller.pure.policy import OUTAGE_PROBE_SECONDS

    held = {"t0-r0": Entry(1, Outcome.running).hold(NOW - OUTAGE_PROBE_SECONDS)}
    probing = decide(obs(ledger=held))
    assert probing.create_pods == [("t0-r0", 1)]
    running = decide(obs(ledger=probing.ledger, pods=(pod("t0-r0"),)))
    assert running.create_pods == [] and running.reason == "ModelUnavailable"


def test_a_held_entry_survives_the_ledger_encoding():
    held = Entry(2, Outcome.running, pods=3).hold(NOW)
    assert Entry.decode(held.encode()) == held


def test_parse_pod_reads_the_model_unavailable_exit():
    from gdpval.controller.pure.observe import parse_pod

    body = {
        "metadata": {"name": "p", "labels": {n.L_COMPONENT: "sample", n.L_SAMPLE: "s", n.L_ATTEMPT: "1"}},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "agent", "state": {"terminated": {"exitCode": 75}}}]},
    }
    assert parse_pod(body).model_unavailable
    body["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 1
    assert not parse_pod(body).model_unavailable


def test_rate_limited_attempts_narrow_the_window_and_clean_ones_widen_it_again():
    from gdpval.controller.pure.status import build_status

    wide = spec(parallelism=4)
    ledger = {s: Entry(1, Outcome.running) for s in SAMPLES[:4]}
    running = tuple(pod(s) for s in SAMPLES[1:4])
    limited = ResultSummary(succeeded=True, rate_limited=3)
    o = obs(spec=wide, ledger=ledger, pods=(pod("t0-r0", phase="Succeeded"), *running), probes={("t0-r0", 1): Probe(committed=limited)})
    narrowed = decide(o)
    assert narrowed.window == 3 and narrowed.create_pods == []  # 3 still run: the freed slot stays shut
    status = build_status(o, narrowed)
    assert status.window == 3
    after = {**narrowed.ledger, "t1-r0": Entry(1, Outcome.running)}
    o2 = obs(spec=wide, status=status, ledger=after, pods=(pod("t1-r0", phase="Succeeded"), *running[1:]), probes={("t1-r0", 1): Probe(committed=OK)})
    widened = decide(o2)
    assert widened.window == 4 and widened.create_pods == [("t4-r0", 1), ("t5-r0", 1)]


def test_rate_limits_cut_the_window_once_per_round_of_pods():
    """Pods started before a cut met the limit under the wider window: their ends cut it no further
    (measured on the cluster: a first wave of 12 pods against a limit of 3 drove it down to 1)."""
    from gdpval.controller.pure.status import build_status

    wide = spec(parallelism=4)
    limited = ResultSummary(succeeded=True, rate_limited=2)
    first_wave = NOW - 60
    ledger = {s: Entry(1, Outcome.running) for s in SAMPLES[:4]}
    running = tuple(pod(s, created=first_wave) for s in SAMPLES[1:4])
    o = obs(spec=wide, ledger=ledger, pods=(pod("t0-r0", phase="Succeeded", created=first_wave), *running), probes={("t0-r0", 1): Probe(committed=limited)})
    cut = decide(o)
    assert cut.window == 3
    status = build_status(o, cut)
    later = NOW + 10
    stale = obs(
        now=later,
        spec=wide,
        status=status,
        ledger=cut.ledger,
        pods=(pod("t1-r0", phase="Succeeded", created=first_wave), *running[1:]),
        probes={("t1-r0", 1): Probe(committed=limited)},
    )
    assert decide(stale).window == 3, "a pod of the wave before the cut cuts no further"
    fresh = obs(
        now=later,
        spec=wide,
        status=status,
        ledger=cut.ledger,
        pods=(pod("t1-r0", phase="Succeeded", created=NOW + 1), *running[1:]),
        probes={("t1-r0", 1): Probe(committed=limited)},
    )
    assert decide(fresh).window == 2, "a pod started under the cut window that meets the limit cuts again"


def test_raising_parallelism_widens_a_window_no_rate_limit_cut():
    """A run at parallelism 1 raised to 4 starts 4 pods at once (a stored full window kept it at 1)."""
    from gdpval.controller.pure.status import build_status

    first = obs(spec=spec(parallelism=1))
    one = decide(first)
    assert len(one.create_pods) == 1
    status = build_status(first, one)
    assert status.window is None, "a window that is all of parallelism is not stored"
    raised = decide(obs(spec=spec(parallelism=4), status=status, ledger=one.ledger, pods=(pod(one.create_pods[0][0]),)))
    assert len(raised.create_pods) == 3

"""Pods started ahead of their turn (spec.samples.startAhead): the decision, the pod, its go, the agent's wait."""

from __future__ import annotations

from dataclasses import replace

import httpx2
import openai
import pytest

from gdpval import contract
from gdpval.agent.client import make_client, rehearse
from gdpval.api.v1alpha1 import GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.effects.memory import RunMemory
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure import names as n
from gdpval.controller.pure.decide import decide
from gdpval.controller.pure.ledger import Entry, Outcome
from gdpval.controller.pure.observe import PodView, parse_pod
from gdpval.controller.pure.status import build_status
from gdpval.controller.types import Observed, Probe
from gdpval.errors import GdpvalError
from gdpval.runner.pod import wait_for_go
from support.run_context import ctx

NOW = 1_000_000.0
SAMPLES = tuple(f"t{i}-r0" for i in range(8))


def spec(ahead: int = 2, parallelism: int = 2) -> GdpvalRunSpec:
    return GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://b/p"}, "parallelism": parallelism, "samples": {"startAhead": ahead}})


def obs(ledger, pods=(), **kw) -> Observed:
    base = dict(now=NOW, spec=spec(), generation=1, status=GdpvalRunStatus(), ledger=ledger, samples=SAMPLES, pods=tuple(pods))
    base.update(kw)
    return Observed(**base)


def pod(sample: str, ahead: bool = False, phase: str = "Running", attempt: int = 1, ready: bool = True) -> PodView:
    name = n.sample_pod_name("run", sample, attempt)
    return PodView(name=name, component="sample", sample=sample, attempt=attempt, phase=phase, deleting=False, created=NOW - 30, ahead=ahead, ready=ready)


def running(*samples: str) -> dict[str, Entry]:
    return {s: Entry(1, Outcome.running) for s in samples}


def test_a_fresh_run_starts_only_its_window_each_pod_waiting_for_its_go():
    plan = decide(obs({}))
    assert plan.create_pods == [("t0-r0", 1), ("t1-r0", 1)]
    assert plan.ahead == {("t0-r0", 1), ("t1-r0", 1)} and plan.go_pods == []


def test_the_first_pods_get_their_go_once_ready_and_pods_ahead_start_as_they_stop_starting():
    first = decide(obs({}))
    starting = decide(obs(first.ledger, [pod("t0-r0", ahead=True, ready=False), pod("t1-r0", ahead=True, ready=False)]))
    assert starting.go_pods == [] and starting.create_pods == []
    one_ready = decide(obs(first.ledger, [pod("t0-r0", ahead=True), pod("t1-r0", ahead=True, ready=False)]))
    assert one_ready.go_pods == [(n.sample_pod_name("run", "t0-r0", 1), 30.0)]
    assert one_ready.create_pods == [("t2-r0", 1)] and one_ready.ahead == {("t2-r0", 1)}


def test_pods_ahead_in_queue_order_once_the_window_runs():
    plan = decide(obs(running("t0-r0", "t1-r0"), [pod("t0-r0"), pod("t1-r0")]))
    assert plan.create_pods == [("t2-r0", 1), ("t3-r0", 1)] and plan.ahead == {("t2-r0", 1), ("t3-r0", 1)}


def test_pods_not_seen_yet_are_not_started_ahead_again():
    first = decide(obs({}))
    plan = decide(obs(first.ledger))  # the next pass, before the watch shows the new pods
    assert plan.create_pods == [] and plan.go_pods == []


def test_without_start_ahead_nothing_waits():
    plan = decide(obs({}, spec=spec(ahead=0)))
    assert plan.create_pods == [("t0-r0", 1), ("t1-r0", 1)] and plan.ahead == set()


def test_pods_waiting_for_their_go_are_outside_the_window():
    pods = [pod("t0-r0"), pod("t1-r0"), pod("t2-r0", ahead=True), pod("t3-r0", ahead=True)]
    plan = decide(obs(running("t0-r0", "t1-r0", "t2-r0", "t3-r0"), pods))
    assert plan.go_pods == [] and plan.create_pods == []


def test_room_in_the_window_goes_to_the_next_pod_ahead_and_one_more_starts_ahead():
    ledger = {**running("t1-r0", "t2-r0", "t3-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    pods = [pod("t1-r0"), pod("t3-r0", ahead=True), pod("t2-r0", ahead=True)]
    plan = decide(obs(ledger, pods))
    assert plan.go_pods == [(n.sample_pod_name("run", "t2-r0", 1), 30.0)]
    assert plan.create_pods == [("t4-r0", 1)] and plan.ahead == {("t4-r0", 1)}


def test_a_ready_pod_ahead_gets_the_go_before_one_still_starting():
    ledger = {**running("t1-r0", "t2-r0", "t3-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    pods = [pod("t1-r0"), pod("t2-r0", ahead=True, ready=False), pod("t3-r0", ahead=True)]
    plan = decide(obs(ledger, pods))
    assert plan.go_pods == [(n.sample_pod_name("run", "t3-r0", 1), 30.0)]


def test_no_go_to_a_pod_ahead_not_ready_and_its_room_kept_for_it():
    ledger = {**running("t1-r0", "t2-r0", "t3-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    pods = [pod("t1-r0"), pod("t2-r0", ahead=True, ready=False), pod("t3-r0", ahead=True, phase="Pending", ready=False)]
    plan = decide(obs(ledger, pods))
    assert plan.go_pods == [] and plan.create_pods == []  # no pod created cold into the window beside them


def test_a_pod_ahead_gets_the_go_once_ready():
    ledger = {**running("t1-r0", "t2-r0", "t3-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    pods = [pod("t1-r0"), pod("t2-r0", ahead=True, ready=False), pod("t3-r0", ahead=True, phase="Pending", ready=False)]
    pods[1] = replace(pods[1], ready=True)
    plan = decide(obs(ledger, pods))
    assert plan.go_pods == [(n.sample_pod_name("run", "t2-r0", 1), 30.0)]
    assert plan.create_pods == [("t4-r0", 1)] and plan.ahead == {("t4-r0", 1)}


def test_a_pod_given_its_go_counts_in_the_window():
    pods = [pod("t0-r0"), pod("t1-r0"), pod("t2-r0"), pod("t3-r0", ahead=True)]
    plan = decide(obs(running("t0-r0", "t1-r0", "t2-r0", "t3-r0"), pods))
    assert plan.go_pods == [] and plan.create_pods == [("t4-r0", 1)] and plan.ahead == {("t4-r0", 1)}


def test_an_ended_pod_ahead_gets_no_go():
    ledger = {**running("t1-r0", "t2-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    pods = [pod("t1-r0"), pod("t2-r0", ahead=True, phase="Failed")]
    plan = decide(obs(ledger, pods))
    assert n.sample_pod_name("run", "t2-r0", 1) not in [name for name, _ in plan.go_pods]


def test_no_go_and_no_pods_ahead_while_suspended():
    ledger = {**running("t1-r0", "t2-r0"), "t0-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1))}
    plan = decide(obs(ledger, [pod("t1-r0"), pod("t2-r0", ahead=True)], spec=spec().model_copy(update={"suspend": True})))
    assert plan.go_pods == [] and plan.ahead == set()


def _waiting_ahead(budget: dict | None = None, **kw):
    """t0 in the window, t1 in the window with its go seen, t2 and t3 ahead (t3 still starting): the spec's budget, if any."""
    ledger = running("t0-r0", "t1-r0", "t2-r0", "t3-r0")
    pods = [pod("t0-r0"), pod("t1-r0"), pod("t2-r0", ahead=True), pod("t3-r0", ahead=True, phase="Pending", ready=False)]
    base = spec() if budget is None else spec().model_copy(update={"budget": budget})
    return obs(ledger | kw.pop("ledger", {}), pods, spec=kw.pop("spec", base), **kw)


AHEAD = [n.sample_pod_name("run", s, 1) for s in ("t2-r0", "t3-r0")]


def test_a_spent_budget_deletes_the_pods_ahead_and_queues_their_attempts_unspent():
    tokens = {"t7-r0": Entry(1, Outcome.succeeded, ended=int(NOW - 1), input_tokens=900, output_tokens=200)}
    spent = GdpvalRunSpec.model_validate(spec().model_dump(by_alias=True) | {"budget": {"runTokens": 1000}})
    plan = decide(_waiting_ahead(ledger=tokens, spec=spent))
    assert plan.reason == "BudgetExhausted" and sorted(plan.delete_pods) == AHEAD and plan.create_pods == []
    assert {s: plan.ledger[s] for s in ("t2-r0", "t3-r0")} == {s: Entry(1, Outcome.queued) for s in ("t2-r0", "t3-r0")}
    assert [e.reason for e in plan.notes] == ["PodsAheadDeleted"] and plan.tally.pending == 5  # queued: pending, not failed
    assert plan.ledger["t0-r0"].outcome == Outcome.running  # pods running their sample are not touched


def test_an_outage_keeps_the_pods_ahead_for_the_patience_of_a_running_sample_then_queues_them():
    hold = spec().samples.outage_hold_seconds
    held = {"t5-r0": Entry(1, Outcome.running).hold(NOW - 10)}
    early = decide(_waiting_ahead(ledger=held))
    assert early.reason == "ModelUnavailable" and early.delete_pods == [] and NOW - 10 + hold in early.wake_at
    late = decide(_waiting_ahead(ledger=held, now=NOW - 10 + hold))
    assert sorted(late.delete_pods) == AHEAD and late.ledger["t2-r0"].outcome == Outcome.queued
    assert late.create_pods == [("t5-r0", 1)] and late.ahead == set()  # the outage's probe pod alone


def test_a_suspended_run_queues_its_pods_ahead_and_pauses_the_rest():
    plan = decide(_waiting_ahead(spec=spec().model_copy(update={"suspend": True})))
    assert sorted(plan.delete_pods) == sorted([*AHEAD, *(n.sample_pod_name("run", s, 1) for s in ("t0-r0", "t1-r0"))])
    assert [plan.ledger[s].outcome for s in ("t0-r0", "t1-r0", "t2-r0", "t3-r0")] == [Outcome.paused] * 2 + [Outcome.queued] * 2


def test_on_resume_queued_attempts_start_again_in_their_turn_under_their_number():
    ledger = {"t0-r0": Entry(1, Outcome.paused), "t1-r0": Entry(1, Outcome.paused), "t2-r0": Entry(1, Outcome.queued)}
    ledger["t3-r0"] = Entry(2, Outcome.queued, pods=2)  # a retry
    first = decide(obs(ledger, probes={("t0-r0", 1): Probe(), ("t1-r0", 1): Probe()}))
    assert first.create_pods == [("t0-r0", 1), ("t1-r0", 1)]  # the paused ones fill the window; nothing beyond it
    after = decide(obs(first.ledger, [pod("t0-r0"), pod("t1-r0")]))
    assert after.create_pods == [("t2-r0", 1), ("t3-r0", 2)] and after.ahead == {("t2-r0", 1), ("t3-r0", 2)}
    assert after.ledger["t3-r0"] == Entry(2, Outcome.running, pods=3)  # the same attempt: nothing spent


def test_a_queued_attempt_waits_for_its_last_pod_to_go():
    ledger = {**running("t0-r0", "t1-r0"), "t2-r0": Entry(1, Outcome.queued)}
    plan = decide(obs(ledger, [pod("t0-r0"), pod("t1-r0"), pod("t2-r0", ahead=True, phase="Failed")]))
    assert ("t2-r0", 1) not in plan.create_pods  # its next pod has the same name


def test_a_queued_entry_survives_the_ledger_encoding():
    entry = Entry(3, Outcome.running, pods=4).queue()
    assert Entry.decode(entry.encode()) == entry and not entry.ended_attempt


def test_a_pod_ahead_waits_on_its_own_annotation_through_the_downward_api():
    built = m.sample_pod(ctx(agent={"sampleDeadlineSeconds": 600}), "t1", 1, ahead=True)
    assert built["metadata"]["annotations"][n.A_GO] == ""
    agent = built["spec"]["containers"][0]
    assert agent["command"][-2:] == ["--go", contract.GO_FILE]
    assert {"name": "go", "mountPath": contract.GO_DIR, "readOnly": True} in agent["volumeMounts"]
    (volume,) = [v for v in built["spec"]["volumes"] if v["name"] == "go"]
    assert volume["downwardAPI"]["items"] == [{"path": "go", "fieldRef": {"fieldPath": f"metadata.annotations['{n.A_GO}']"}}]
    assert "activeDeadlineSeconds" not in built["spec"]  # counted from the go
    assert built["spec"]["automountServiceAccountToken"] is False
    assert parse_pod(built).ahead


def test_a_pod_ahead_turns_ready_only_when_its_agent_waits_ready():
    run = ctx(samples={"pendingTimeoutSeconds": 120})
    agent = m.sample_pod(run, "t1", 1, ahead=True)["spec"]["containers"][0]
    probe = agent["startupProbe"]
    assert probe["exec"]["command"] == ["test", "-e", contract.READY_FILE]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 120  # then stuck, as a pod Pending that long
    assert "readinessProbe" not in agent and "httpGet" not in probe  # no port in the agent; nothing probed once it runs
    assert contract.READY_FILE.startswith(contract.SCRATCH + "/")
    (sandbox,) = [box for box in m.sample_pod(run, "t1", 1, ahead=True)["spec"]["initContainers"] if box["name"] == "sandbox"]
    assert "scratch" not in {mount["name"] for mount in sandbox["volumeMounts"]}  # the model cannot say ready for the agent
    assert "startupProbe" not in m.sample_pod(run, "t1", 1)["spec"]["containers"][0]


def test_the_pod_view_reads_the_ready_condition():
    built = m.sample_pod(ctx(), "t1", 1, ahead=True)
    assert not parse_pod(built).ready
    built["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
    assert not parse_pod(built).ready
    built["status"]["conditions"][0]["status"] = "True"
    assert parse_pod(built).ready


def test_a_pod_in_the_window_has_no_go_to_wait_for():
    run = ctx(agent={"sampleDeadlineSeconds": 600})
    built = m.sample_pod(run, "t1", 1)
    assert n.A_GO not in built["metadata"]["annotations"] and not parse_pod(built).ahead
    assert "go" not in {v["name"] for v in built["spec"]["volumes"]} and built["spec"]["activeDeadlineSeconds"] == m.pod_deadline(run.spec)


def test_the_go_patch_gives_the_go_and_the_deadline_from_now():
    run = ctx(agent={"sampleDeadlineSeconds": 600})
    patch = m.go_patch(run.spec, 41.7)
    assert patch["metadata"]["annotations"] == {n.A_GO: contract.GO_VALUE}
    assert patch["spec"]["activeDeadlineSeconds"] == 42 + m.pod_deadline(run.spec)
    given = m.sample_pod(run, "t1", 1, ahead=True)
    given["metadata"]["annotations"] |= patch["metadata"]["annotations"]
    assert not parse_pod(given).ahead


def test_a_go_given_counts_before_the_watch_shows_it():
    memory = RunMemory()
    waiting = pod("t2-r0", ahead=True)
    memory.went.add(waiting.name)
    assert not memory.seen_go((waiting,))[0].ahead
    assert memory.seen_go((replace(waiting, ahead=False),)) == (replace(waiting, ahead=False),) and memory.went == set()


def test_the_agent_says_it_waits_ready_then_goes_on_the_go_and_refuses_anything_else(tmp_path):
    go, ready = tmp_path / "go", tmp_path / "ready"
    go.write_text(contract.GO_VALUE)
    wait_for_go(go, ready)
    assert ready.exists()
    go.write_text("rm -rf /")
    with pytest.raises(GdpvalError, match="unexpected go signal"):
        wait_for_go(go, ready)


def test_the_rehearsal_before_the_go_sends_nothing():
    sent: list[httpx2.Request] = []

    class Recorded(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            sent.append(request)
            return httpx2.Response(500)

    rehearse(make_client("http://127.0.0.1:9/v1").with_options(http_client=openai.DefaultHttpx2Client(transport=Recorded())))
    assert sent == []


def test_pods_waiting_for_their_go_count_pending_not_running():
    pods = [pod("t0-r0"), pod("t1-r0", ahead=True, ready=False), pod("t2-r0", ahead=True), pod("t3-r0", ahead=True)]
    plan = decide(obs(running("t0-r0", "t1-r0", "t2-r0", "t3-r0"), pods))
    assert plan.go_pods == [(n.sample_pod_name("run", "t2-r0", 1), 30.0)]  # the window of 2 has room for one
    status = build_status(obs(running("t0-r0", "t1-r0", "t2-r0", "t3-r0"), pods), plan)
    assert (status.samples.running, status.samples.pending, status.started_ahead) == (2, 6, 2)
    assert "2 running" in plan.message

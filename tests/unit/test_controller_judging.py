"""spec.judge: after assembly a judge Job scores the run; its estimate lands in status.judge and never fails the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes.utils import parse_quantity
from pydantic import ValidationError

from gdpval.api.v1alpha1 import GdpvalRunSpec, GdpvalRunStatus
from gdpval.controller.effects.gather import secret_refs
from gdpval.controller.effects.s3 import read_estimate
from gdpval.controller.pure import manifests as m
from gdpval.controller.pure.decide import decide
from gdpval.controller.pure.ledger import Entry, Outcome
from gdpval.controller.pure.manifests import judge_job
from gdpval.controller.pure.observe import JobView, PodView
from gdpval.controller.pure.status import build_status
from gdpval.controller.types import Observed, Submission
from gdpval.judge import LABEL
from gdpval.judge.models import JudgeResults, SampleScore
from gdpval.judge.store import write_results
from gdpval.judge.verdicts import PAIRWISE_LABEL, UNRELIABLE, PairResults, PairScore
from gdpval.settings import MAX_INCONSISTENT
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support.fake_kube import FakeKube

NOW = 1_000_000.0
SAMPLES = ("t0-r0", "t1-r0")
JUDGE = {"model": "judge-m", "baseURL": "http://10.250.0.1:8000/v1", "concurrency": 2, "apiKeySecretRef": {"name": "judge", "key": "key"}}


def spec(**kw) -> GdpvalRunSpec:
    return GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://b/p"}} | kw)


def job(component: str, succeeded: bool = False, failed: bool = False) -> JobView:
    return JobView(f"run-{component}", component, 0, succeeded, failed, "BackoffLimitExceeded" if failed else "", NOW)


def assembled(**kw) -> Observed:
    """Every sample done and the submission built."""
    jobs = {"prepare": job("prepare", succeeded=True), "assemble": job("assemble", succeeded=True)} | kw.pop("jobs", {})
    base = dict(now=NOW, spec=spec(judge=JUDGE), generation=1, status=GdpvalRunStatus(), samples=SAMPLES, jobs=jobs)
    ledger = {s: Entry(1, Outcome.succeeded, ended=int(NOW)) for s in SAMPLES}
    return Observed(**(base | {"ledger": ledger, "submission": Submission("s3://b/p/runs/run/submission", 1.0)} | kw))


_SCORE = dict(task_id="t", sector="s", occupation="o", judge_model="judge-m")


def judged_storage(root: Path) -> LocalStorage:
    """A judge's results.json: one sample scored 3 of 4, one judge failure."""
    storage = LocalStorage(root)
    scores = [SampleScore(sample_id="a", status="scored", points=3, max_points=4, **_SCORE), SampleScore(sample_id="b", status="failed", **_SCORE)]
    write_results(storage, JudgeResults.of("run", "judge-m", "now", scores))
    return storage


def test_without_a_judge_section_the_run_succeeds_after_assembly():
    plan = decide(assembled(spec=spec()))
    assert plan.state == "Succeeded" and plan.create_jobs == [] and plan.judge is None


def test_the_judge_job_runs_after_assembly_and_its_estimate_lands_in_status(tmp_path):
    plan = decide(assembled())
    assert (plan.state, plan.create_jobs) == ("Judging", ["judge"])
    plan = decide(assembled(jobs={"judge": job("judge")}))
    assert plan.state == "Judging" and plan.create_jobs == [] and "judges the deliverables (rubric)" in plan.message
    estimate = read_estimate(judged_storage(tmp_path), "run")
    observed = assembled(jobs={"judge": job("judge", succeeded=True)}, judge=estimate)
    plan = decide(observed)
    assert plan.state == "Succeeded" and plan.judge == estimate and "judge estimate 75.0%" in plan.message and LABEL in plan.message
    status = build_status(observed, plan)
    assert status.judge is not None and status.judge.score == 0.75 and status.judge.state == "Succeeded"
    wire = status.model_dump(mode="json", by_alias=True)["judge"]
    assert (wire["maxPoints"], wire["scored"], wire["resultsURI"].endswith("runs/run/judge/results.json")) == (4.0, 1, True)


def test_a_failed_judge_job_is_recorded_and_the_run_still_succeeds():
    plan = decide(assembled(jobs={"judge": job("judge", failed=True)}))
    assert plan.state == "Succeeded" and plan.judge is not None and plan.judge.state == "Failed"
    assert "the judge Job run-judge failed: BackoffLimitExceeded" in plan.judge.message and "run-judge failed" in plan.message


def test_unreadable_results_are_a_failed_estimate(tmp_path):
    storage = LocalStorage(tmp_path)
    assert read_estimate(storage, "run").state == "Failed" and "no results.json" in read_estimate(storage, "run").message
    storage.put_text("runs/run/judge/results.json", "{")
    assert "unreadable" in read_estimate(storage, "run").message


def test_the_judge_job_runs_gdpval_judge_with_the_key_from_its_secret():
    ctx = m.RunContext("demo", "ns", "uid-1", spec(judge=JUDGE), "agent:1", "sandbox:1")
    manifest = judge_job(ctx)
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    args = container["args"] if "args" in container else container["command"]
    assert args[:2] == ["gdpval", "judge"] and args[args.index("--judge-model") + 1] == "judge-m" and args[args.index("--concurrency") + 1] == "2"
    assert args[args.index("--output") + 1] == "s3://b/p" and "--judge-api-key-env" not in args
    env = {e["name"]: e for e in container["env"]}
    assert env["OPENAI_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "judge", "key": "key"}}
    assert "sk-" not in json.dumps(manifest)
    assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "judge"
    assert manifest["spec"]["backoffLimit"] == m.PREPARE_BACKOFF_LIMIT


def test_the_judge_job_labels_position_bias_at_the_specs_share():
    """spec.judge.maxInconsistency reaches the Job's command (the CLI's --max-inconsistency), which labels the
    estimate in results.json and so in status; without it the Job gets the CLI's own default."""
    for judge, share in (({**JUDGE, "maxInconsistency": 0.15}, "0.15"), (JUDGE, str(MAX_INCONSISTENT))):
        ctx = m.RunContext("demo", "ns", "uid-1", spec(judge=judge), "agent:1", "sandbox:1")
        [container] = judge_job(ctx)["spec"]["template"]["spec"]["containers"]
        args = container["args"] if "args" in container else container["command"]
        assert args[args.index("--max-inconsistency") + 1] == share
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        spec(judge={**JUDGE, "maxInconsistency": 1.5})


def test_a_judge_pod_that_cannot_start_says_why():
    waiting = PodView("run-judge-x", "judge", "", 0, "Pending", False, NOW, waiting='CreateContainerConfigError (judge): secret "judge" not found')
    plan = decide(assembled(jobs={"judge": job("judge")}, pods=(waiting,)))
    assert plan.state == "Judging" and plan.reason == "PodsNotStarting" and 'secret "judge" not found' in plan.message


def test_a_missing_judge_key_secret_blocks_the_run_and_a_changed_ref_is_read_again():
    kube = FakeKube(lambda: NOW)
    [missing] = kube.check_secrets("ns", spec(judge=JUDGE)).blockers
    assert missing.reason == "SecretNotFound" and "spec.judge.apiKeySecretRef" in missing.message
    kube.add_secret("ns", "judge", {"other": "x"})
    assert [b.reason for b in kube.check_secrets("ns", spec(judge=JUDGE)).blockers] == ["SecretKeyNotFound"]
    kube.add_secret("ns", "judge", {"key": "sk-test"})
    assert kube.check_secrets("ns", spec(judge=JUDGE)).blockers == ()
    other = JUDGE | {"apiKeySecretRef": {"name": "judge-2", "key": "key"}}
    assert len({secret_refs(spec()), secret_refs(spec(judge=JUDGE)), secret_refs(spec(judge=other))}) == 3


def pairwise_storage(root: Path) -> LocalStorage:
    """A pairwise results.json against the gold: a win, an inconsistent tie, a loss and a failed pair."""
    storage = LocalStorage(root)
    base = dict(task_id="t", sector="s", occupation="o", against="gold", judge_model="judge-m")
    scores = [
        PairScore(sample_id="a", verdict="win", **base | {"task_id": "t1"}),
        PairScore(sample_id="b", verdict="tie", inconsistent=True, **base | {"task_id": "t2"}),
        PairScore(sample_id="c", verdict="loss", **base | {"task_id": "t3"}),
        PairScore(sample_id="d", verdict="failed", **base | {"task_id": "t4"}),
    ]
    results = PairResults.of("run", "gold", "judge-m", "now", scores)
    storage.put_text(layout.judge_pair_results("run", "gold"), results.model_dump_json())
    return storage


def test_the_judge_job_passes_spec_judge_method():
    for method in ("rubric", "pairwise", "both"):
        ctx = m.RunContext("demo", "ns", "uid-1", spec(judge=JUDGE | {"method": method}), "agent:1", "sandbox:1")
        [container] = judge_job(ctx)["spec"]["template"]["spec"]["containers"]
        args = container["args"] if "args" in container else container["command"]
        assert args[args.index("--method") + 1] == method
    assert spec(judge=JUDGE).judge.method == "rubric"


def test_pairwise_totals_land_in_status_judge(tmp_path):
    pairwise = JUDGE | {"method": "pairwise"}
    estimate = read_estimate(pairwise_storage(tmp_path), "run", "pairwise")
    assert estimate.state == "Succeeded" and estimate.score is None and estimate.label == PAIRWISE_LABEL
    observed = assembled(spec=spec(judge=pairwise), jobs={"judge": job("judge", succeeded=True)}, judge=estimate)
    plan = decide(observed)
    assert plan.state == "Succeeded" and "wins-or-ties 66.7% (95% interval" in plan.message and PAIRWISE_LABEL in plan.message
    wire = build_status(observed, plan).model_dump(mode="json", by_alias=True)["judge"]
    totals = wire["pairwise"]
    assert (totals["wins"], totals["ties"], totals["losses"], totals["inconsistent"], totals["failed"]) == (1, 1, 1, 1, 1)
    assert totals["winsOrTies"] == 0.6667 and totals["intervalLow"] <= 0.6667 <= totals["intervalHigh"]
    assert totals["resultsURI"].endswith("runs/run/judge/pairwise/gold/results.json") and wire["method"] == "pairwise"
    # one of the three pairs judged in both orders disagreed: over the 30 % limit, so status says the estimate is unreliable
    assert (totals["inconsistentRate"], totals["failedRate"], totals["reliability"]) == (0.3333, 0.25, UNRELIABLE)
    assert f"orders disagreed on 33.3%, failed 25.0%; {UNRELIABLE}" in plan.message


def test_both_methods_need_both_results(tmp_path):
    storage = pairwise_storage(tmp_path)
    assert read_estimate(storage, "run", "both").state == "Failed"  # no rubric results.json
    scores = [SampleScore(sample_id="a", status="scored", points=1, max_points=2, **_SCORE)]
    write_results(storage, JudgeResults.of("run", "judge-m", "now", scores))
    both = read_estimate(storage, "run", "both")
    assert both.state == "Succeeded" and both.score == 0.5 and both.pairwise is not None and both.pairwise.wins == 1
    plan = decide(assembled(spec=spec(judge=JUDGE | {"method": "both"}), jobs={"judge": job("judge", succeeded=True)}, judge=both))
    assert "judge estimate 50.0%" in plan.message and "wins-or-ties 66.7%" in plan.message
    missing = read_estimate(LocalStorage(tmp_path / "empty"), "run", "pairwise")
    assert missing.state == "Failed" and "pairwise results.json is missing" in missing.message


def test_only_the_judge_job_is_pointed_at_the_gold_and_no_sandbox_holds_a_storage_credential():
    """The gold lives under judge-only/ in the run's storage; what keeps it from a sample pod: the stage step copies
    only the sample's entry and references, and the sandbox container has no S3 credential, API key or storage flag."""
    secret = {"credentialsSecret": {"name": "s3", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"}}
    ctx = m.RunContext("demo", "ns", "uid-1", spec(judge=JUDGE | {"method": "pairwise"}, output={"url": "s3://b/p"} | secret), "agent:1", "sandbox:1")
    pod = m.sample_pod(ctx, "t0-r0", 1)
    containers = {c["name"]: c for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]}
    sandbox = containers["sandbox"]
    assert not sandbox.get("env") and not sandbox.get("envFrom") and "s3://" not in json.dumps(sandbox)
    assert {v["name"] for v in sandbox["volumeMounts"]} == {"workspace", "references", "sandbox-tmp", "sandbox-shm", "token"}
    assert containers["stage"]["command"][:2] == ["gdpval", "stage"] or containers["stage"].get("args", [])[:2] == ["gdpval", "stage"]
    for made in (pod, m.network_policy(ctx), m.prepare_job(ctx), m.assemble_job(ctx)):
        assert "judge-only" not in json.dumps(made) and "pairwise" not in json.dumps(made)
    assert "pairwise" in json.dumps(judge_job(ctx))


def test_the_judge_job_renders_in_a_limited_sidecar_of_the_sandbox_image_that_holds_no_credential():
    """The judge (agent image) renders through a native sidecar of the run's sandbox image: non-root, read-only
    root, the render limits as its container's, a sized memory /tmp, no env but HOME, no S3 or API key, a token
    made in the pod (no Secret), and only the shared render folder, which the judge mounts too."""
    secret = {"credentialsSecret": {"name": "s3", "accessKeyIdKey": "id", "secretAccessKeyKey": "secret"}}
    ctx = m.RunContext("demo", "ns", "uid-1", spec(judge=JUDGE | {"method": "pairwise"}, output={"url": "s3://b/p"} | secret), "agent:1", "full:1")
    pod = judge_job(ctx)["spec"]["template"]["spec"]
    token, sidecar = pod["initContainers"]
    [judge] = pod["containers"]
    assert (token["image"], sidecar["image"], judge["image"]) == ("agent:1", "full:1", "agent:1")
    assert sidecar["restartPolicy"] == "Always" and "restartPolicy" not in token and pod["automountServiceAccountToken"] is False
    for container in (token, sidecar):
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and security["capabilities"] == {"drop": ["ALL"]}
    assert sidecar["resources"]["limits"] == {"memory": "2048Mi", "ephemeral-storage": "512Mi"}
    for container in (token, sidecar, judge):  # the API refuses a request above its limit
        resources = container.get("resources", {})
        for name, limit in resources.get("limits", {}).items():
            assert parse_quantity(resources.get("requests", {}).get(name, "0")) <= parse_quantity(limit), (container["name"], name)
    assert sidecar["command"][sidecar["command"].index("--workspace") + 1] == "/render" and "--token-file" in sidecar["command"]
    assert sidecar["env"] == [{"name": "HOME", "value": "/tmp"}] and "secret" not in json.dumps(sidecar).lower().replace("secrets.token", "")
    mounts = {v["name"]: v for v in sidecar["volumeMounts"]}
    assert set(mounts) == {"render", "render-tmp", "render-token"} and mounts["render-token"]["readOnly"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["render-tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": m.RENDER_TMP} and "secret" not in volumes["render-token"]
    env = {e["name"]: e.get("value") for e in judge["env"]}
    assert env["GDPVAL_RENDER_SANDBOX"] == "http://127.0.0.1:7000" and env["GDPVAL_RENDER_IMAGE"] == "full:1"
    assert {v["name"] for v in judge["volumeMounts"]} == {"scratch", "render", "render-token"}
    assert "render" not in json.dumps(m.sample_pod(ctx, "t0-r0", 1)["spec"]["volumes"])

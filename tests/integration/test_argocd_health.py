"""The Argo CD health check (gitops/argocd/health-gdpvalrun.lua) run on sample GdpvalRuns.

Argo CD runs health scripts in gopher-lua, a Lua 5.1, with only the base, table, string and math
libraries; the tests use lupa's Lua 5.1 with the same libraries, `obj` bound to the object.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.paths import HACK
from support.chart import find_tool

lupa_lua51 = pytest.importorskip("lupa.lua51", reason="lupa (pip install lupa) runs the Lua health check")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "gitops" / "argocd" / "health-gdpvalrun.lua"
CM_PATCH = ROOT / "gitops" / "argocd" / "argocd-cm-health-patch.yaml"
CASES = ROOT / "gitops" / "testdata" / "health"
EXPECTED = yaml.safe_load((CASES / "expected.yaml").read_text())
CM_KEY = "resource.customizations.health.gdpval.io_GdpvalRun"


def health(obj: dict, script: str | None = None) -> dict:
    """Run the script the way Argo CD does: `obj` global, the script's return value is the result."""
    lua = lupa_lua51.LuaRuntime(unpack_returned_tuples=True)
    # gopher-lua in Argo CD has no os/io/package/debug; a script that needs them must fail here too.
    lua.execute("os, io, package, debug, require, dofile, loadfile = nil, nil, nil, nil, nil, nil, nil")
    # JSON round trip: numbers become floats and nulls disappear, as in Argo CD's conversion.
    data = json.loads(json.dumps(obj), parse_int=float)
    lua.globals().obj = lua.table_from(data, recursive=True)
    result = lua.execute(script if script is not None else SCRIPT.read_text())
    return {"status": result["status"], "message": result["message"]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_objects(name: str) -> None:
    obj = yaml.safe_load((CASES / name).read_text())
    assert health(obj) == EXPECTED[name]


def test_every_sample_has_an_expectation() -> None:
    files = {p.name for p in CASES.glob("*.yaml")} - {"expected.yaml"}
    assert files == set(EXPECTED)
    assert {e["status"] for e in EXPECTED.values()} == {"Healthy", "Degraded", "Progressing", "Suspended"}


def test_status_is_always_one_argo_knows() -> None:
    """Odd but possible objects (empty conditions, missing metadata) still get a valid status."""
    odd = [
        {"apiVersion": "gdpval.io/v1alpha1", "kind": "GdpvalRun"},
        {"metadata": {"generation": 1}, "status": {}},
        {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": []}},
        {"metadata": {"generation": 1}, "spec": {"suspend": True}, "status": {"observedGeneration": 1, "state": "Suspended"}},
    ]
    got = [health(o)["status"] for o in odd]
    assert got == ["Progressing", "Progressing", "Progressing", "Suspended"]


def test_argocd_cm_patch_embeds_the_same_script() -> None:
    patch = yaml.safe_load(CM_PATCH.read_text())
    assert patch["kind"] == "ConfigMap" and patch["metadata"]["name"] == "argocd-cm"
    assert patch["data"][CM_KEY] == SCRIPT.read_text()


# The operator's own status model: statuses it really writes, through the Lua check.
status_mod = pytest.importorskip("gdpval.controller.pure.status", reason="operator status model not importable")
GdpvalRunStatus = pytest.importorskip("gdpval.api.v1alpha1").GdpvalRunStatus


def _operator_status(state: str, *, suspend: bool = False, generation: int = 1) -> dict:
    from gdpval.api.v1alpha1 import GdpvalRunSpec, GdpvalRunStatus
    from gdpval.controller.types import Observed, Plan, Submission

    spec = GdpvalRunSpec.model_validate({"model": {"name": "m"}, "output": {"url": "s3://bucket/runs"}, "suspend": suspend})
    obs = Observed(
        now=1_800_000_000.0,
        spec=spec,
        generation=generation,
        status=GdpvalRunStatus(),
        ledger={},
        samples=("a", "b"),
        submission=Submission(uri="s3://bucket/runs/r/submission", ready_rate=1.0),
    )
    reasons = {"Succeeded": "SubmissionReady", "Failed": "FailureBudgetExceeded", "Suspended": "Suspended", "Running": "SamplesRunning"}
    plan = Plan(ledger={}, state=state, reason=reasons[state], message=f"{state.lower()} for the test")
    status = status_mod.status_patch(status_mod.build_status(obs, plan))
    spec_json = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"metadata": {"name": "r", "generation": generation}, "spec": spec_json, "status": status}


@pytest.mark.parametrize(
    ("state", "suspend", "expected"),
    [
        ("Succeeded", False, "Healthy"),
        ("Failed", False, "Degraded"),
        ("Suspended", True, "Suspended"),
        ("Running", False, "Progressing"),
    ],
)
def test_statuses_the_operator_writes(state: str, suspend: bool, expected: str) -> None:
    obj = _operator_status(state, suspend=suspend, generation=3)
    assert obj["status"]["observedGeneration"] == 3
    assert health(obj)["status"] == expected
    # A newer spec than the status describes is never reported as settled.
    obj["metadata"]["generation"] = 4
    assert health(obj)["status"] == "Progressing"


def test_a_blocked_run_is_degraded() -> None:
    """Blocked waits for a person (a missing Secret, unreachable storage): Argo CD shows it as Degraded, with the fix."""
    obj = _operator_status("Running")
    blocked = status_mod.blocked_status(
        GdpvalRunStatus.model_validate(obj["status"]), 1, "SecretNotFound", "Secret 'openai' not found: create it", 1_800_000_100.0
    )
    obj["status"] = status_mod.status_patch(blocked)
    assert health(obj) == {"status": "Degraded", "message": "Secret 'openai' not found: create it"}


def test_operator_status_is_readable_by_kstatus() -> None:
    """kstatus (Flux, `kubectl wait`) needs observedGeneration and a Ready condition: True only on success."""
    for state, ready in (("Succeeded", "True"), ("Running", "False"), ("Failed", "False")):
        status = _operator_status(state)["status"]
        conditions = {c["type"]: c for c in status["conditions"]}
        assert status["observedGeneration"] == 1
        assert conditions["Ready"]["status"] == ready
        assert all(c["observedGeneration"] == 1 for c in conditions.values())


# --- kstatus (Flux, cli-utils): the real library, through gitops/kstatus ------------------------

KSTATUS = {
    "succeeded.yaml": "Current",
    "succeeded-then-suspended.yaml": "Current",
    "running.yaml": "InProgress",
    "preparing.yaml": "InProgress",
    "blocked.yaml": "InProgress",
    "suspended.yaml": "InProgress",
    "suspend-observed-pods-draining.yaml": "InProgress",
    "succeeded-stale-generation.yaml": "InProgress",
    "suspend-not-yet-observed.yaml": "InProgress",
}


@pytest.fixture(scope="module")
def kstatus():
    if shutil.which("go") is None:
        pytest.skip("go is needed to build gitops/kstatus")
    # hack/build-tools.sh builds it as it builds the tools that serve tests, cached by its source and
    # under a lock (xdist workers share one build); at the tests' priority, since they wait on it.
    proc = subprocess.run([str(HACK / "build-tools.sh"), "kstatus"], capture_output=True, text=True, timeout=900, env={**os.environ, "GO_NICE": "0"})
    assert proc.returncode == 0, proc.stderr
    binary = find_tool("kstatus")
    assert binary is not None, f"hack/build-tools.sh kstatus left no binary:\n{proc.stderr}"

    def compute(*paths: Path) -> dict[str, str]:
        out = subprocess.run([str(binary), *map(str, paths)], capture_output=True, text=True, check=True, timeout=60).stdout
        return {Path(line.split("\t")[0]).name: line.split("\t")[1] for line in out.splitlines()}

    return compute


@pytest.mark.slow
def test_kstatus_reads_the_samples(kstatus) -> None:
    assert kstatus(*(CASES / name for name in KSTATUS)) == KSTATUS


@pytest.mark.slow
def test_kstatus_reads_what_the_operator_writes(kstatus, tmp_path) -> None:
    for state in ("Succeeded", "Running"):
        (tmp_path / f"{state}.yaml").write_text(yaml.safe_dump({"apiVersion": "gdpval.io/v1alpha1", "kind": "GdpvalRun", **_operator_status(state)}))
    assert kstatus(tmp_path / "Succeeded.yaml", tmp_path / "Running.yaml") == {"Succeeded.yaml": "Current", "Running.yaml": "InProgress"}


@pytest.mark.slow
def test_kstatus_sees_a_failed_run_as_failed(kstatus, tmp_path) -> None:
    path = tmp_path / "failed.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gdpval.io/v1alpha1", "kind": "GdpvalRun", **_operator_status("Failed")}))
    assert kstatus(path) == {"failed.yaml": "Failed"}

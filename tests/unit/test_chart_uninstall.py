"""The chart's uninstall hook script (charts/gdpval/files/release-runs.py) against an in-memory API."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

SCRIPT = Path(__file__).resolve().parents[2] / "charts" / "gdpval" / "files" / "release-runs.py"
OURS, OTHER = "gdpval.io/finalizer", "example.com/keep"


def load_script():
    spec = importlib.util.spec_from_file_location("gdpval_release_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeRuns:
    """CustomObjectsApi for GdpvalRuns: resourceVersion conflicts, deletion held by finalizers."""

    def __init__(self, runs: list[dict], conflicts: int = 0):
        self.runs = {(r["metadata"]["namespace"], r["metadata"]["name"]): r for r in runs}
        self.conflicts = conflicts
        self.deleted: list[tuple[str, str]] = []
        self.crd_installed = True

    def _get(self, ns: str, name: str) -> dict:
        if (ns, name) not in self.runs:
            raise ApiException(status=404)
        return self.runs[(ns, name)]

    def list_cluster_custom_object(self, group, version, plural):
        if not self.crd_installed:
            raise ApiException(status=404)
        return {"items": [copy.deepcopy(r) for r in self.runs.values()]}

    def list_namespaced_custom_object(self, group, version, namespace, plural):
        if not self.crd_installed:
            raise ApiException(status=404)
        return {"items": [copy.deepcopy(r) for (ns, _), r in self.runs.items() if ns == namespace]}

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        return copy.deepcopy(self._get(namespace, name))

    def patch_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        run = self._get(namespace, name)
        if body["metadata"]["resourceVersion"] != run["metadata"]["resourceVersion"] or self.conflicts:
            self.conflicts = max(0, self.conflicts - 1)
            run["metadata"]["resourceVersion"] = str(int(run["metadata"]["resourceVersion"]) + 1)
            raise ApiException(status=409)
        run["metadata"]["finalizers"] = body["metadata"]["finalizers"]
        run["metadata"]["resourceVersion"] = str(int(run["metadata"]["resourceVersion"]) + 1)
        self._collect(namespace, name)

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, propagation_policy=None):
        self._get(namespace, name)["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        self.deleted.append((namespace, name))
        self._collect(namespace, name)

    def _collect(self, ns: str, name: str) -> None:
        run = self.runs[(ns, name)]
        if run["metadata"].get("deletionTimestamp") and not run["metadata"].get("finalizers"):
            del self.runs[(ns, name)]


def run_obj(ns: str, name: str, finalizers: list[str], deleting: bool = False) -> dict:
    meta = {"namespace": ns, "name": name, "resourceVersion": "1", "finalizers": list(finalizers)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.fixture(scope="module")
def script():
    return load_script()


def test_stuck_runs_are_released_and_others_keep_their_finalizers(script) -> None:
    api = FakeRuns(
        [
            run_obj("a", "stuck", [OURS], deleting=True),
            run_obj("a", "shared", [OURS, OTHER]),
            run_obj("b", "plain", []),
        ]
    )
    for run in api.list_cluster_custom_object("", "", "")["items"]:
        script.release(api, run, {OURS}, delete=False)
    assert ("a", "stuck") not in api.runs, "a run waiting only for our finalizer is gone"
    assert api.runs[("a", "shared")]["metadata"]["finalizers"] == [OTHER]
    assert ("b", "plain") in api.runs and not api.deleted


def test_delete_runs_deletes_then_releases(script) -> None:
    api = FakeRuns([run_obj("a", "r1", [OURS]), run_obj("a", "r2", [])])
    for run in script.list_runs(api, ["a"]):
        script.release(api, run, {OURS}, delete=True)
    assert api.runs == {} and sorted(api.deleted) == [("a", "r1"), ("a", "r2")]


def test_conflicting_writers_are_retried(script) -> None:
    api = FakeRuns([run_obj("a", "busy", [OURS, OTHER])], conflicts=2)
    script.release(api, api.list_cluster_custom_object("", "", "")["items"][0], {OURS}, delete=False)
    assert api.runs[("a", "busy")]["metadata"]["finalizers"] == [OTHER]


def test_missing_crd_means_nothing_to_do(script) -> None:
    api = FakeRuns([])
    api.crd_installed = False
    assert script.list_runs(api, []) == [] and script.list_runs(api, ["a"]) == []


def test_other_api_errors_are_not_swallowed(script) -> None:
    class Forbidden(FakeRuns):
        def list_namespaced_custom_object(self, *args, **kwargs):
            raise ApiException(status=403)

    with pytest.raises(ApiException):
        script.list_runs(Forbidden([]), ["a"])

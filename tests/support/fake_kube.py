"""An in-memory Kubernetes API with the calls of `gdpval.controller.effects.kube.Kube`, for the Controller's unit tests.

It keeps what the API server would for one operator: pods and Jobs (and live kopf-like indexes of
them), the ledger ConfigMap with resourceVersion conflicts, Secrets, Events, status patches and
NetworkPolicies, with the same idempotence as `Kube` (a create of an existing object is a no-op, a
delete of a missing one too). A test plays kubelet and Job controller (`set_pod_phase`,
`finish_job`) and can run an action once just before or after any call takes effect (`at`,
`fail`): a raise there stands for the operator dying at that point.
"""

from __future__ import annotations

import base64
import copy
import functools
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from gdpval.controller.effects.kube import Conflict, Kube
from gdpval.controller.pure import names as n
from gdpval.controller.pure.observe import iso, parse_job, parse_pod

Key = tuple[str, str]


class Crash(Exception):
    """The operator process dies here (raised by the stand-in at a point the test chose)."""


def _call(method: Callable) -> Callable:
    """Count the call and run the actions armed for it, before and after it takes effect."""

    @functools.wraps(method)
    def call(self: FakeKube, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(method.__name__)
        self._run_armed(method.__name__, after=False)
        result = method(self, *args, **kwargs)
        self._run_armed(method.__name__, after=True)
        return result

    return call


def _key(manifest: Mapping[str, Any]) -> Key:
    return manifest["metadata"]["namespace"], manifest["metadata"]["name"]


class _Index(Mapping):
    """Views of our objects by run uid, always current, like the kopf indexes the operator reads."""

    def __init__(self, objects: dict[Key, dict], parse: Callable[[Mapping], Any]):
        self.objects, self.parse = objects, parse

    def _uids(self) -> set[str]:
        return {o["metadata"]["labels"][n.L_RUN_UID] for o in self.objects.values()}

    def __getitem__(self, uid: str) -> list:
        views = [self.parse(o) for o in self.objects.values() if o["metadata"]["labels"][n.L_RUN_UID] == uid]
        if not views:
            raise KeyError(uid)
        return views

    def __iter__(self) -> Iterator[str]:
        return iter(self._uids())

    def __len__(self) -> int:
        return len(self._uids())


class FakeKube(Kube):
    def __init__(self, clock: Callable[[], float]):
        # No API client: every method of `Kube` that calls the API is replaced below.
        self.clock = clock
        self.pods: dict[Key, dict] = {}
        self.jobs: dict[Key, dict] = {}
        self.configmaps: dict[Key, dict] = {}
        self.secrets: dict[Key, dict[str, str]] = {}
        self.network_policies: dict[Key, dict] = {}
        self.events: list[dict] = []
        self.statuses: dict[Key, dict] = {}
        self.status_writes = 0
        self.deleted_runs: list[Key] = []
        self.pods_created: list[tuple[str, int]] = []  # (sample, attempt) of every sample pod created
        self.jobs_created: list[str] = []  # the component of every Job created
        self.refuse_pods: str | None = None  # while set, pod creates are refused with this message (quota, admission)
        self.calls: list[str] = []
        self.armed: dict[tuple[str, bool], Callable[[], None]] = {}
        self.crash_at_call: tuple[int, bool] | None = None
        self._version = 0
        self.pods_index = _Index(self.pods, parse_pod)
        self.jobs_index = _Index(self.jobs, parse_job)

    # --- what a test arranges and plays --------------------------------------------------------

    def at(self, method: str, action: Callable[[], None], after: bool = False) -> None:
        """Run `action` once, the next time `method` is called, before (or after) it takes effect."""
        self.armed[(method, after)] = action

    def fail(self, method: str, exc: Exception, after: bool = False) -> None:
        def raise_it() -> None:
            raise exc

        self.at(method, raise_it, after)

    def _run_armed(self, method: str, after: bool) -> None:
        action = self.armed.pop((method, after), None)
        if action is not None:
            action()
        if self.crash_at_call == (len(self.calls), after):
            self.crash_at_call = None
            raise Crash(f"crash {'after' if after else 'before'} call {len(self.calls)} ({method})")

    def add_secret(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.secrets[(namespace, name)] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        self.pods[(namespace, name)]["status"] = {"phase": phase}

    def finish_job(self, namespace: str, name: str, ok: bool = True) -> None:
        condition = {"type": "Complete" if ok else "Failed", "status": "True", "reason": "" if ok else "BackoffLimitExceeded"}
        self.jobs[(namespace, name)]["status"] = {"active": 0, "conditions": [condition]}

    def touch_ledger(self, namespace: str, name: str) -> None:
        """Another writer changes the ledger: our resourceVersion goes stale."""
        self.configmaps[(namespace, name)]["metadata"]["resourceVersion"] = self._next_version()

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _stored(self, manifest: Mapping[str, Any], status: dict) -> dict:
        obj = copy.deepcopy(dict(manifest))
        obj["metadata"]["creationTimestamp"] = iso(self.clock())
        obj["metadata"]["resourceVersion"] = self._next_version()
        obj["status"] = status
        return obj

    # --- reads ---------------------------------------------------------------------------------

    @_call
    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        found = self.secrets.get((namespace, name))
        return dict(found) if found is not None else None

    @_call
    def pod_exists(self, namespace: str, selector: str) -> bool:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return any(ns == namespace and wanted.items() <= (pod["metadata"].get("labels") or {}).items() for (ns, _), pod in self.pods.items())

    @_call
    def read_ledger(self, namespace: str, name: str, uid: str) -> tuple[dict[str, str], str] | None:
        cm = self.configmaps.get((namespace, name))
        if cm is None:
            return None
        if uid not in {ref["uid"] for ref in cm["metadata"].get("ownerReferences", [])}:
            raise Conflict(f"ledger {name} belongs to an earlier run of the same name; waiting for its removal")
        return dict(cm.get("data") or {}), cm["metadata"]["resourceVersion"]

    # --- writes --------------------------------------------------------------------------------

    @_call
    def create_ledger(self, manifest: Mapping[str, Any]) -> str:
        if _key(manifest) in self.configmaps:
            raise Conflict("ledger created concurrently")
        cm = self.configmaps[_key(manifest)] = self._stored(manifest, {})
        return cm["metadata"]["resourceVersion"]

    @_call
    def write_ledger(self, namespace: str, name: str, data: Mapping[str, str], resource_version: str, removed: Collection[str] = ()) -> str:
        """A merge patch, as the API server applies it: keys not named stay, removed ones go."""
        cm = self.configmaps.get((namespace, name))
        if cm is None or cm["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"ledger {name} changed: Conflict")
        kept = {k: v for k, v in (cm.get("data") or {}).items() if k not in removed}
        cm["data"] = kept | dict(data)
        cm["metadata"]["resourceVersion"] = self._next_version()
        return cm["metadata"]["resourceVersion"]

    @_call
    def create_pod(self, manifest: Mapping[str, Any]) -> str | None:
        if self.refuse_pods:
            return self.refuse_pods
        if _key(manifest) not in self.pods:
            self.pods[_key(manifest)] = self._stored(manifest, {"phase": "Pending"})
            view = parse_pod(manifest)
            if view.component == n.COMPONENT_SAMPLE:
                self.pods_created.append((view.sample, view.attempt))
        return None

    @_call
    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """A merge patch of a pod's annotations and spec, as the API server applies one (a pod gone is no error)."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return
        for part in ("metadata", "spec"):
            for key, value in (patch.get(part) or {}).items():
                pod[part][key] = {**(pod[part].get(key) or {}), **value} if isinstance(value, Mapping) else value
        pod["metadata"]["resourceVersion"] = self._next_version()

    @_call
    def delete_pod(self, namespace: str, name: str) -> None:
        self.pods.pop((namespace, name), None)

    @_call
    def create_job(self, manifest: Mapping[str, Any]) -> str | None:
        if _key(manifest) not in self.jobs:
            self.jobs[_key(manifest)] = self._stored(manifest, {"active": 1})
            self.jobs_created.append(parse_job(manifest).component)
        return None

    @_call
    def delete_job(self, namespace: str, name: str) -> None:
        self.jobs.pop((namespace, name), None)

    @_call
    def suspend_job(self, namespace: str, name: str, suspend: bool) -> None:
        """As the Job controller does: a suspended Job has no active pod."""
        job = self.jobs.get((namespace, name))
        if job is not None:
            job["spec"]["suspend"] = suspend
            job["status"]["active"] = 0 if suspend else 1

    @_call
    def ensure_network_policy(self, manifest: Mapping[str, Any]) -> None:
        self.network_policies[_key(manifest)] = copy.deepcopy(dict(manifest))

    @_call
    def ensure_secret(self, manifest: Mapping[str, Any]) -> None:
        if _key(manifest) not in self.secrets:
            self.add_secret(*_key(manifest), manifest["stringData"])

    @_call
    def post_event(self, manifest: Mapping[str, Any]) -> None:
        self.events.append(copy.deepcopy(dict(manifest)))

    @_call
    def delete_run(self, namespace: str, name: str) -> None:
        self.deleted_runs.append((namespace, name))

    @_call
    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.statuses[(namespace, name)] = copy.deepcopy(dict(status))
        self.status_writes += 1

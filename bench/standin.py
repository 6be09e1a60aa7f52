"""The cluster around the operator, played for the scale benchmark: kubelet, agent and Job controller.

- Sample pods: marked Running when they appear, then after `sample_seconds` the stand-in agent
  commits result.json at the pod's layout key (as a sample pod would, result.json being the commit
  marker) and the pod is marked Succeeded, as the kubelet would on exit 0.
- prepare Job: run.json and the manifest are written, then the Job is marked Complete; assemble Job:
  submission_info.json, then Complete.
- Every object the operator writes is watched, for the largest one and for pod finished -> deleted.

No pod has a node, so the API server removes a deleted pod at once (no grace period to play).
"""

from __future__ import annotations

import datetime
import heapq
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from gdpval.controller.pure import names as n
from gdpval.dataset.models import DatasetRef, Sample, Task
from gdpval.manifest import ManifestEntry, dump_manifest
from gdpval.sample import SampleResult, SampleStatus, Usage
from gdpval.storage import Storage, layout
from support import runs

log = logging.getLogger("bench.standin")
OnEvent = Callable[[str, dict[str, Any]], None]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def watch_forever(list_fn: Callable[..., Any], on_event: OnEvent, stop: threading.Event, **kwargs: Any) -> None:
    """Feed every event of a namespaced list to `on_event` until `stop`; a lost watch starts over from a
    fresh list (ADDED for what exists), so nothing is missed but deletions during the gap."""
    version = None
    while not stop.is_set():
        try:
            for event in watch.Watch().stream(list_fn, resource_version=version, timeout_seconds=30, deserialize=False, **kwargs):
                obj = event.get("object") or {}
                if event["type"] == "ERROR" or not obj:
                    version = None
                    break
                version = obj.get("metadata", {}).get("resourceVersion", version)
                on_event(event["type"], obj)
                if stop.is_set():
                    return
        except ApiException as exc:
            if exc.status != 410:
                log.warning("watch %s: %s", getattr(list_fn, "__name__", list_fn), exc)
                time.sleep(1)
            version = None
        except KeyError:
            version = None  # the client's raw stream fails this way on an ERROR event (an expired resourceVersion, 410)
        except Exception:
            log.warning("watch %s failed; starting over", getattr(list_fn, "__name__", list_fn), exc_info=True)
            time.sleep(1)
            version = None


@dataclass
class Largest:
    """The largest object seen per kind, as JSON (what the watch serves; etcd holds about as much)."""

    sizes: dict[str, tuple[int, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def see(self, obj: dict[str, Any]) -> None:
        size = len(json.dumps(obj, separators=(",", ":")))
        kind = obj.get("kind", "?")
        with self.lock:
            if size > self.sizes.get(kind, (0, ""))[0]:
                self.sizes[kind] = (size, obj.get("metadata", {}).get("name", ""))

    def report(self) -> dict[str, Any]:
        kind, (size, name) = max(self.sizes.items(), key=lambda kv: kv[1][0], default=("", (0, "")))
        return {"bytes": size, "kind": kind, "name": name, "by_kind": {k: v[0] for k, v in sorted(self.sizes.items())}}


@dataclass
class PodTimes:
    finished: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)
    finished_by_run: dict[str, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def finish(self, pod: str, run: str, at: float) -> None:
        with self.lock:
            self.finished[pod] = at
            self.finished_by_run.setdefault(run, []).append(at)

    def finished_to_deleted(self) -> list[float]:
        with self.lock:
            return [self.deleted[p] - t for p, t in self.finished.items() if p in self.deleted]


class Timer:
    """Calls due at a monotonic time, run on a thread pool by one scheduling thread."""

    def __init__(self, pool: ThreadPoolExecutor, stop: threading.Event):
        self.pool, self.stop = pool, stop
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.cond = threading.Condition()
        self.count = 0

    def at(self, when: float, call: Callable[[], None]) -> None:
        with self.cond:
            self.count += 1
            heapq.heappush(self.heap, (when, self.count, call))
            self.cond.notify()

    def loop(self) -> None:
        while not self.stop.is_set():
            with self.cond:
                wait = self.heap[0][0] - time.monotonic() if self.heap else 0.5
                if wait > 0:
                    self.cond.wait(min(wait, 0.5))
                    continue
                _, _, call = heapq.heappop(self.heap)
            self.pool.submit(call)


def _status_patch(phase: str) -> dict[str, Any]:
    when = now_rfc3339()
    if phase == "Running":
        state: dict[str, Any] = {"running": {"startedAt": when}}
    else:
        state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": when, "finishedAt": when}}
    agent = {"name": "agent", "image": "agent", "imageID": "", "ready": phase == "Running", "restartCount": 0, "state": state}
    return {"status": {"phase": phase, "startTime": when, "containerStatuses": [agent]}}


def _job_complete() -> dict[str, Any]:
    when = now_rfc3339()
    conditions = [
        {"type": t, "status": "True", "reason": "CompletionsReached", "message": "done", "lastTransitionTime": when} for t in ("SuccessCriteriaMet", "Complete")
    ]
    return {"status": {"startTime": when, "completionTime": when, "succeeded": 1, "conditions": conditions}}


def _drain(response: Any) -> None:
    """Read the unparsed reply whole, so its connection goes back to the pool clean."""
    response.read()
    response.release_conn()


def _transient(exc: Exception) -> bool:
    """A dropped connection or an overloaded API server (etcd timeouts come back as 500): worth another try."""
    if isinstance(exc, ApiException):
        return exc.status in (429, 500, 503, 504)
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError))


def retrying(call: Callable[[], None], attempts: int = 8) -> None:
    for attempt in range(attempts):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts - 1 or not _transient(exc):
                raise
            time.sleep(0.5 * (attempt + 1))


def result_json(sample: str, attempt: int) -> str:
    result = SampleResult(sample_id=sample, task_id=sample, attempt=attempt, status=SampleStatus.succeeded, usage=Usage(input_tokens=7, output_tokens=3))
    return result.model_dump_json()


class Cluster:
    """The kubelet, the agent and the Job controller for every run in `namespace`."""

    def __init__(self, api_client: client.ApiClient, namespace: str, storage: Storage, samples_per_run: int, sample_seconds: float, threads: int = 8):
        self.core, self.batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.namespace, self.storage = namespace, storage
        self.samples_per_run, self.sample_seconds = samples_per_run, sample_seconds
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(threads)
        self.timer = Timer(self.pool, self.stop)
        self.largest, self.times = Largest(), PodTimes()
        self.states: dict[str, str] = {}
        self.state_changed = threading.Condition()
        self.seen_pods: set[str] = set()
        self.jobs_done: set[str] = set()
        self.errors: list[str] = []

    def start(self) -> Cluster:
        selector = n.MANAGED_SELECTOR
        watches: list[tuple[Callable[..., Any], OnEvent, dict[str, Any]]] = [
            (self.core.list_namespaced_pod, self._on_pod, {"label_selector": selector}),
            (self.batch.list_namespaced_job, self._on_job, {"label_selector": selector}),
            (self.core.list_namespaced_config_map, self._on_object, {}),
            (self.core.list_namespaced_event, self._on_object, {}),
            (self._list_runs, self._on_run, {}),
        ]
        for list_fn, handler, kwargs in watches:
            threading.Thread(target=watch_forever, args=(list_fn, handler, self.stop), kwargs={"namespace": self.namespace, **kwargs}, daemon=True).start()
        threading.Thread(target=self.timer.loop, daemon=True).start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _list_runs(self, namespace: str, **kwargs: Any) -> Any:
        return self.custom.list_namespaced_custom_object("gdpval.io", "v1alpha1", namespace, "gdpvalruns", **kwargs)

    # --- watch handlers (on watch threads: quick, the work goes to the pool) ----------------------

    def _on_object(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            self.largest.see(obj)

    def _on_run(self, kind: str, obj: dict[str, Any]) -> None:
        self._on_object(kind, obj)
        state = (obj.get("status") or {}).get("state", "")
        with self.state_changed:
            self.states[obj["metadata"]["name"]] = "Deleted" if kind == "DELETED" else state
            self.state_changed.notify_all()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if kind == "DELETED":
            with self.times.lock:
                self.times.deleted.setdefault(name, time.monotonic())
            return
        if meta.get("labels", {}).get(n.L_COMPONENT) != n.COMPONENT_SAMPLE or name in self.seen_pods or meta.get("deletionTimestamp"):
            return
        self.seen_pods.add(name)
        self.largest.see(pod)
        self.pool.submit(self._guard, self._start_pod, pod)

    def _on_job(self, kind: str, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        if kind == "DELETED" or meta["name"] in self.jobs_done:
            return
        self.jobs_done.add(meta["name"])
        self.largest.see(job)
        component = meta["labels"].get(n.L_COMPONENT)
        act = {n.COMPONENT_PREPARE: self._prepare, n.COMPONENT_ASSEMBLE: self._assemble}.get(component)
        if act:
            self.pool.submit(self._guard, act, job)

    # --- the played parts ------------------------------------------------------------------------

    def _guard(self, act: Callable[[dict[str, Any]], None], obj: dict[str, Any]) -> None:
        try:
            act(obj)
        except ApiException as exc:
            if exc.status != 404:  # a pod the operator deleted meanwhile is no error
                self.errors.append(f"{obj['metadata']['name']}: {exc.status} {exc.reason}")
        except Exception as exc:
            log.exception("standin failed on %s", obj["metadata"]["name"])
            self.errors.append(f"{obj['metadata']['name']}: {exc!r}")

    def _patch_pod_status(self, name: str, phase: str) -> None:
        retrying(lambda: _drain(self.core.patch_namespaced_pod_status(name, self.namespace, _status_patch(phase), _preload_content=False)))

    def _start_pod(self, pod: dict[str, Any]) -> None:
        self._patch_pod_status(pod["metadata"]["name"], "Running")
        self.timer.at(time.monotonic() + self.sample_seconds, lambda: self._guard(self._finish_pod, pod))

    def _finish_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        sample, attempt = meta["annotations"][n.A_SAMPLE_ID], int(meta["labels"][n.L_ATTEMPT])
        run = meta["labels"][n.L_RUN]
        folder = layout.cluster_run(self.namespace, run, meta["labels"][n.L_RUN_UID])
        retrying(lambda: self.storage.put_text(layout.result(folder, sample, attempt), result_json(sample, attempt)))
        self._patch_pod_status(meta["name"], "Succeeded")
        self.times.finish(meta["name"], run, time.monotonic())

    def _folder(self, job: dict[str, Any]) -> str:
        labels = job["metadata"]["labels"]
        return layout.cluster_run(self.namespace, labels[n.L_RUN], labels[n.L_RUN_UID])

    def _complete(self, job: dict[str, Any]) -> None:
        retrying(lambda: _drain(self.batch.patch_namespaced_job_status(job["metadata"]["name"], self.namespace, _job_complete(), _preload_content=False)))

    def _prepare(self, job: dict[str, Any]) -> None:
        folder = self._folder(job)
        entries = [
            ManifestEntry(sample=Sample.of(f"task{i:05d}", 0), task=Task(task_id=f"task{i:05d}", sector="s", occupation="o", prompt="p"))
            for i in range(self.samples_per_run)
        ]
        self.storage.put_text(layout.manifest(folder), dump_manifest(entries))
        record = runs.record(folder, dataset=DatasetRef(source="s3", location="s3://bench/dataset", revision="rev-bench"))
        self.storage.put_text(layout.run_json(folder), record.dump())
        self._complete(job)

    def _assemble(self, job: dict[str, Any]) -> None:
        info = {"submission_ready": 1.0, "completed": 1.0, "counts": {"total": self.samples_per_run}}
        self.storage.put_text(layout.package_info(layout.submission(self._folder(job))), json.dumps(info))
        self._complete(job)

    # --- waiting ---------------------------------------------------------------------------------

    def wait_states(self, runs_: list[str], states: tuple[str, ...], timeout: float) -> dict[str, float]:
        """Block until every run is in one of `states` or `timeout` passed; the monotonic time each run got there."""
        reached: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        with self.state_changed:
            while len(reached) < len(runs_) and time.monotonic() < deadline:
                for run in runs_:
                    if run not in reached and self.states.get(run) in states:
                        reached[run] = time.monotonic()
                self.state_changed.wait(max(0.0, min(deadline - time.monotonic(), 1.0)))
        return reached

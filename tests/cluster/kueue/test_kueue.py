"""Kueue admits GdpvalRuns on the real local cluster: a whole run as one Workload, or pod by pod.

Kueue's manager runs as a host process (tests/support/kueue.py) for this module's namespace only.
A run labelled `kueue.x-k8s.io/queue-name` itself is queued whole: the operator's Workload of
`parallelism` + `startAhead` sample pods. A run with `spec.pod.labels: {kueue.x-k8s.io/queue-name: ...}` goes through
the plain-pod integration instead: each of its pods is created behind Kueue's scheduling gate and
runs once the queue's quota (here a count of pods) admits it.
What is asserted comes from watch events, in the API server's order.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from gdpval.controller.pure.queue import EVICTED, QUEUED, workload_name
from gdpval.fakemodel.server import start_background
from support.kueue import ADMISSION_GATE, KUEUE_FINALIZER, NAMESPACE_LABEL, PRIORITY_LABEL, QUEUE_LABEL, kueue_manager
from support.operator import OperatorNamespace, operator_namespace, pool_manifest
from support.polling import wait_until
from support.standins import make_standin_dataset
from support.watching import EventRecorder, api_client

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RUN_TIMEOUT = 300
K = 2  # pods the first queue admits at once
Events = list[tuple[str, dict[str, Any]]]


class Env:
    def __init__(self, ns: OperatorNamespace, node_ip: str) -> None:
        self.ns, self.kube, self.node_ip = ns, ns.kube, node_ip
        self.api = api_client(ns.kube.kubeconfig)
        self.flavor = ns.kube.namespace

    def queue(self, name: str, pods: int, preemption: dict[str, str] | None = None) -> str:
        """A ClusterQueue admitting `pods` pods at once (CPU, memory and disk ample) and its LocalQueue `name`."""
        mine = {NAMESPACE_LABEL: self.kube.namespace}
        cluster_queue = f"{self.kube.namespace}-{name}"
        quotas = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "64"), ("memory", "256Gi"), ("ephemeral-storage", "1Ti"), ("pods", pods))]
        self.kube.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cluster_queue, "labels": mine},
                "spec": {
                    "namespaceSelector": {"matchLabels": mine},
                    "preemption": preemption or {},
                    "resourceGroups": [{"coveredResources": [q["name"] for q in quotas], "flavors": [{"name": self.flavor, "resources": quotas}]}],
                },
            }
        )
        self.kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": name}, "spec": {"clusterQueue": cluster_queue}})
        for kind, obj in (("clusterqueue", cluster_queue), ("localqueue", name)):
            self.kube.run("wait", "--for=condition=Active", f"{kind}/{obj}", "--timeout=60s")
        return name

    def set_pod_quota(self, queue: str, pods: int) -> None:
        cluster_queue = f"{self.kube.namespace}-{queue}"
        quotas = self.kube.get("clusterqueue", cluster_queue)["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        index = next(i for i, q in enumerate(quotas) if q["name"] == "pods")
        patch = f'[{{"op":"replace","path":"/spec/resourceGroups/0/flavors/0/resources/{index}/nominalQuota","value":{pods}}}]'
        self.kube.run("patch", "clusterqueue", cluster_queue, "--type=json", "-p", patch)

    def operator_pass(self, run: str) -> None:
        """Make the operator pass over `run` now: raise its parallelism by one (applied at once) and
        wait until the status shows the new generation."""
        parallelism = self.kube.get("gdpvalrun", run)["spec"]["parallelism"]
        self.kube.run("patch", "gdpvalrun", run, "--type=merge", "-p", f'{{"spec":{{"parallelism":{parallelism + 1}}}}}')
        generation = self.kube.get("gdpvalrun", run)["metadata"]["generation"]
        wait_until(
            lambda: self.kube.run_status(run).get("observedGeneration", 0) >= generation, 60, f"the operator to observe generation {generation} of {run}"
        )

    def priority_class(self, name: str, value: int) -> str:
        """A WorkloadPriorityClass, for a pod's `kueue.x-k8s.io/priority-class` label."""
        full = f"{self.kube.namespace}-{name}"
        meta = {"name": full, "labels": {NAMESPACE_LABEL: self.kube.namespace}}
        self.kube.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": meta, "value": value})
        return full

    def submit(self, name: str, model_url: str, queue: str, priority: str | None = None, **spec: Any) -> str:
        labels = {QUEUE_LABEL: queue} | ({PRIORITY_LABEL: priority} if priority else {})
        self.kube.apply(self.ns.manifest(name, model_url, pod={"labels": labels}, **spec))
        return name

    def submit_queued(self, name: str, model_url: str, queue: str, priority: str | None = None, **spec: Any) -> str:
        """A run queued whole: the Kueue labels on the run itself, none on its pods."""
        manifest = self.ns.manifest(name, model_url, **spec)
        manifest["metadata"]["labels"] = {QUEUE_LABEL: queue} | ({PRIORITY_LABEL: priority} if priority else {})
        self.kube.apply(manifest)
        return name

    def workload(self, run: str) -> dict[str, Any]:
        uid = self.kube.get("gdpvalrun", run)["metadata"]["uid"]
        return self.kube.get("workload", workload_name(run, uid)) or {}

    def wait_succeeded(self, name: str) -> dict[str, Any]:
        done = self.kube.run("wait", "--for=condition=Finished", f"gdpvalrun/{name}", f"--timeout={RUN_TIMEOUT}s", check=False, timeout=RUN_TIMEOUT + 30)
        status = self.kube.run_status(name)
        assert done.returncode == 0 and status.get("state") == "Succeeded", f"{status}\n--- operator log tail ---\n{self.ns.operator.logs()[-4000:]}"
        return status

    def pod_events(self) -> EventRecorder:
        recorder = EventRecorder(client.CoreV1Api(self.api).list_namespaced_pod, self.kube.namespace)
        recorder.start()
        return recorder

    def workload_events(self) -> EventRecorder:
        api = client.CustomObjectsApi(self.api)
        recorder = EventRecorder(api.list_namespaced_custom_object, "kueue.x-k8s.io", "v1beta2", self.kube.namespace, "workloads")
        recorder.start()
        return recorder


@pytest.fixture(scope="module")
def env(cluster, cluster_s3, kueue, sample_dataset, tmp_path_factory):
    dataset = make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("dataset"))
    with (
        operator_namespace(cluster, cluster_s3, "gdpval-kueue", dataset, tmp_path_factory.mktemp("operator")) as ns,
        kueue_manager(ns.kube, kueue, tmp_path_factory.mktemp("kueue")),
    ):
        flavor = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": ns.kube.namespace, "labels": {NAMESPACE_LABEL: ns.kube.namespace}},
        }
        ns.kube.apply(flavor)
        yield Env(ns, cluster.node_ip)
        ns.kube.run("delete", "gdpvalruns", "--all", "--timeout=60s", check=False, timeout=90)


def run_pods(events: Events, run: str, component: str | None = None) -> Events:
    """The events of `run`'s pods (of one component, if given)."""
    return [
        (kind, pod)
        for kind, pod in events
        if pod["metadata"].get("labels", {}).get("gdpval.io/run") == run
        and component in (None, pod["metadata"].get("labels", {}).get("app.kubernetes.io/component"))
    ]


def gated(pod: dict[str, Any]) -> bool:
    return any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


def unfinished(kind: str, pod: dict[str, Any]) -> bool:
    return kind != "DELETED" and pod.get("status", {}).get("phase") in ("Pending", "Running")


def most_at_once(events: Events, counts) -> int:
    """The most pods at one time, over a pod watch, for which `counts(kind, pod)` holds."""
    state: dict[str, bool] = {}
    most = 0
    for kind, pod in events:
        state[pod["metadata"]["name"]] = counts(kind, pod)
        most = max(most, sum(state.values()))
    return most


def admitted(kind: str, pod: dict[str, Any]) -> bool:
    return unfinished(kind, pod) and not gated(pod)


def admitted_owners(events: Events) -> set[str]:
    """Pods whose Workload was admitted at some point."""
    return {
        ref["name"]
        for _, wl in events
        if any(c["type"] == "Admitted" and c["status"] == "True" for c in wl.get("status", {}).get("conditions", []))
        for ref in wl["metadata"].get("ownerReferences", [])
        if ref["kind"] == "Pod"
    }


def test_a_queue_admits_a_run_at_most_its_quota_at_once(env):
    """Parallelism 2 and 2 pods ahead against quota for K = 2: every pod, ahead or not, waits behind Kueue's gate
    until admitted, and a pod ahead admitted holds its quota while it waits for its go."""
    queue = env.queue("two-pods", K)
    pods, workloads = env.pod_events(), env.workload_events()
    with start_background(host=env.node_ip, port=0) as model:
        name = env.submit("queued", model.base_url, queue, parallelism=2, selection={"limit": 4}, samples={"startAhead": 2})
        status = env.wait_succeeded(name)
    selector = f"gdpval.io/run={name},app.kubernetes.io/component=sample"
    wait_until(lambda: not (env.kube.get("pods", selector=selector) or {}).get("items"), 60, "the finished sample pods deleted, past Kueue's finalizer")
    pods.stop(), workloads.stop()
    assert status["progress"] == "4/4" and status["samples"]["succeeded"] == 4 and status["samples"]["failed"] == 0
    every, samples = run_pods(pods.events, name), run_pods(pods.events, name, "sample")
    created = [pod for kind, pod in every if kind == "ADDED"]
    assert created and all(gated(pod) and KUEUE_FINALIZER in pod["metadata"]["finalizers"] for pod in created), [p["metadata"] for p in created]
    assert len({p["metadata"]["name"] for _, p in samples}) == 4 and never_deleted_while_gated(samples)
    assert most_at_once(samples, unfinished) > K, "the pods ahead never waited beside the quota's pods"
    assert most_at_once(samples, admitted) == K and most_at_once(every, admitted) == K
    assert {p["metadata"]["name"] for p in created} <= admitted_owners(workloads.events)


def gated_longer_than(env: Env, run: str, seconds: float) -> dict[str, Any] | None:
    """A sample pod of `run` behind Kueue's gate for more than `seconds`, once the run's Running
    condition says it waits for admission."""
    message = env.kube.condition(run, "Running").get("message", "")
    for pod in (env.kube.get("pods", selector=f"gdpval.io/run={run},app.kubernetes.io/component=sample") or {}).get("items", []):
        created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        if gated(pod) and "waiting for admission" in message and (datetime.now(UTC) - created).total_seconds() > seconds:
            return pod
    return None


def pod_admitted(env: Env, name: str) -> bool:
    pod = env.kube.get("pod", name)
    assert pod, f"{name} vanished while it waited for admission"
    return not gated(pod)


def never_deleted_while_gated(events: Events) -> bool:
    return not any(gated(pod) and (kind == "DELETED" or pod["metadata"].get("deletionTimestamp")) for kind, pod in events)


def test_raising_the_quota_admits_a_pod_that_waited_past_its_pending_timeout(env):
    """Quota for one pod at parallelism 2, the model holding every reply: one sample pod runs, the
    other waits behind the gate past `pendingTimeoutSeconds`, seen so by an operator pass, and is neither
    failed nor replaced;
    raising the quota admits it while the first is still running, and the run succeeds."""
    queue = env.queue("one-pod", 1)
    pods = env.pod_events()
    with start_background(host=env.node_ip, port=0, hold_after=0) as model:
        name = env.submit("raised", model.base_url, queue, parallelism=2, selection={"limit": 2}, samples={"pendingTimeoutSeconds": 30})
        wait_until(lambda: model.app.gate.waiting, RUN_TIMEOUT, "the admitted sample pod's first model request")
        waiting = wait_until(lambda: gated_longer_than(env, name, 32), RUN_TIMEOUT, "a sample pod gated past its pending timeout (30 s)")
        env.operator_pass(name)  # one that sees the gated pod past its timeout
        env.set_pod_quota(queue, 2)
        wait_until(lambda: pod_admitted(env, waiting["metadata"]["name"]), 60, "the waiting pod admitted once the quota was raised")
        assert model.app.gate.waiting, "the first sample pod finished before the second was admitted"
        model.app.gate.release()
        status = env.wait_succeeded(name)
    pods.stop()
    assert status["samples"]["succeeded"] == 2 and status["samples"]["failed"] == 0
    samples = run_pods(pods.events, name, "sample")
    assert len({p["metadata"]["name"] for _, p in samples}) == 2 and never_deleted_while_gated(samples)
    assert most_at_once(samples, admitted) == 2


def preempted(pod: dict[str, Any]) -> bool:
    """Kueue's mark on a pod it ends (preemption, eviction)."""
    return any(c["type"] == "TerminationTarget" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def test_a_higher_priority_run_preempts_a_sample_pod_that_starts_again_under_its_attempt(env):
    """Quota for one pod: a low-priority run's sample pod, mid-sample (its model holds every reply),
    is preempted by a high-priority run's pods. Kueue ends it; the operator re-creates it under the
    same attempt (the cluster ended it, so it costs no retry), and it runs once the other run is done."""
    queue = env.queue("preempting", 1, preemption={"withinClusterQueue": "LowerPriority"})
    low_priority, high_priority = env.priority_class("low", 1), env.priority_class("high", 100)
    pods = env.pod_events()
    with start_background(host=env.node_ip, port=0, hold_after=0) as held, start_background(host=env.node_ip, port=0) as model:
        low = env.submit("low", held.base_url, queue, low_priority, parallelism=1, selection={"limit": 1})
        wait_until(lambda: held.app.gate.waiting, RUN_TIMEOUT, "the low-priority sample pod's first model request")
        high = env.submit("high", model.base_url, queue, high_priority, parallelism=1, selection={"limit": 1})
        env.wait_succeeded(high)
        held.app.gate.release()
        status = env.wait_succeeded(low)
    pods.stop()
    samples = run_pods(pods.events, low, "sample")
    assert any(preempted(pod) for _, pod in samples), "Kueue never preempted the low-priority sample pod"
    names = {pod["metadata"]["name"] for _, pod in samples}
    assert len(names) == 1 and sum(kind == "ADDED" for kind, _ in samples) >= 2, "not re-created under the same attempt"
    assert status["samples"]["succeeded"] == 1 and status["samples"]["failed"] == 0


def workload_condition(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def test_a_run_queued_whole_asks_quota_for_its_pods_ahead_too_and_keeps_to_what_kueue_admitted(env):
    """The run's own label queues it as one Workload of its window and its pods ahead (parallelism 2 +
    startAhead 1: 3 pods): with quota for one pod it holds (no prepare Job, no pods) and says so; lowering
    parallelism to 1 while it waits resizes the Workload to 2; quota for 2 admits it whole. Raising
    parallelism back to 2 mid-run (the model holding every reply) is capped at the 2 pods admitted, and
    the status says so; no more than 2 sample pods are ever live. It succeeds and its Workload ends Finished."""
    queue = env.queue("whole", 1)
    pods = env.pod_events()
    with start_background(host=env.node_ip, port=0, hold_after=0) as model:
        name = env.submit_queued("whole", model.base_url, queue, parallelism=2, selection={"limit": 4}, samples={"startAhead": 1})
        wait_until(lambda: env.kube.condition(name, "Suspended").get("reason") == QUEUED and env.workload(name), 60, "the run waiting for admission")
        assert f"waiting for admission by Kueue in queue {queue}" in env.kube.condition(name, "Ready")["message"]
        assert not (env.kube.get("pods", selector=f"gdpval.io/run={name}") or {}).get("items"), "a run waiting for admission has no pods"
        assert pod_set_count(env, name) == 3, "pods waiting ahead hold their requests: the Workload asks for them"
        env.kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"parallelism":1}}')
        wait_until(lambda: pod_set_count(env, name) == 2, 60, "the waiting Workload resized to parallelism 1 + startAhead 1")
        env.set_pod_quota(queue, 2)
        wait_until(lambda: model.app.gate.waiting, RUN_TIMEOUT, "the first sample's model request")
        env.kube.run("patch", "gdpvalrun", name, "--type=merge", "-p", '{"spec":{"parallelism":2}}')
        capped = "Kueue admitted 2 sample pods, fewer than parallelism + startAhead (3)"
        wait_until(lambda: capped in env.kube.condition(name, "Ready").get("message", ""), 60, "the status saying the run keeps to its admission")
        model.app.gate.release()
        status = env.wait_succeeded(name)
    pods.stop()
    assert status["samples"]["succeeded"] == 4 and status["samples"]["failed"] == 0
    assert most_at_once(run_pods(pods.events, name, "sample"), unfinished) == 2, "more sample pods than Kueue admitted"
    finished = wait_until(lambda: workload_condition(env.workload(name), "Finished"), 60, "the Workload Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")


def pod_set_count(env: Env, run: str) -> int:
    return env.workload(run)["spec"]["podSets"][0]["count"]


def test_a_higher_priority_run_preempts_a_whole_run_that_resumes_under_its_attempt(env):
    """Quota for one pod: a low-priority run, mid-sample, is evicted whole by a high-priority run in
    the same queue; its pod goes and its attempt is paused, the high run succeeds, then the low run
    is admitted again and its sample succeeds under the same attempt, with no retry spent."""
    queue = env.queue("whole-preempting", 1, preemption={"withinClusterQueue": "LowerPriority"})
    low_priority, high_priority = env.priority_class("whole-low", 1), env.priority_class("whole-high", 100)
    pods = env.pod_events()
    with start_background(host=env.node_ip, port=0, hold_after=0) as held, start_background(host=env.node_ip, port=0) as model:
        low = env.submit_queued("whole-low", held.base_url, queue, low_priority, parallelism=1, selection={"limit": 1})
        wait_until(lambda: held.app.gate.waiting, RUN_TIMEOUT, "the low-priority sample pod's first model request")
        high = env.submit_queued("whole-high", model.base_url, queue, high_priority, parallelism=1, selection={"limit": 1})
        wait_until(lambda: env.kube.condition(low, "Suspended").get("reason") == EVICTED, 60, "the low-priority run evicted")
        env.wait_succeeded(high)
        held.app.gate.release()
        status = env.wait_succeeded(low)
    pods.stop()
    samples = run_pods(pods.events, low, "sample")
    names = {pod["metadata"]["name"] for _, pod in samples}
    assert len(names) == 1 and sum(kind == "ADDED" for kind, _ in samples) == 2, "the evicted sample did not start again under the same attempt"
    assert not any(QUEUE_LABEL in pod["metadata"].get("labels", {}) for _, pod in samples), "the pods themselves are not queued"
    evictions = env.workload(low).get("status", {}).get("schedulingStats", {}).get("evictions", [])
    assert any(e["reason"] == "Preempted" for e in evictions), evictions
    assert status["samples"]["succeeded"] == 1 and status["samples"]["failed"] == 0


def quota_pending(events: Events, owners: set[str]) -> set[str]:
    """Pods of `owners` whose Workload Kueue looked at and left without quota (QuotaReserved False)."""
    return {
        ref["name"]
        for _, wl in events
        if any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in wl.get("status", {}).get("conditions", []))
        for ref in wl["metadata"].get("ownerReferences", [])
        if ref["kind"] == "Pod" and ref["name"] in owners
    }


def test_a_pool_under_a_full_queue_starts_nothing_until_quota_frees(env):
    """A GdpvalPool labelled for a queue with no room: each of its pods waits behind Kueue's gate, its Workload
    pending, none scheduled, the pool counting them as starting; quota freed admits them and they turn ready."""
    queue = env.queue("pool-full", 0)
    pods, workloads = env.pod_events(), env.workload_events()
    env.kube.apply(pool_manifest("kq-pool", env.kube.namespace, images=env.ns.images, size=2, pod={"labels": {QUEUE_LABEL: queue}}))

    def mine() -> set[str]:
        return {p["metadata"]["name"] for kind, p in pods.events if kind == "ADDED" and p["metadata"]["labels"].get("gdpval.io/pool") == "kq-pool"}

    wait_until(lambda: len(mine()) == 2 and quota_pending(workloads.events, mine()) == mine(), 120, "both pool pods' Workloads pending for quota")
    assert not any(p["spec"].get("nodeName") for _, p in pods.events if p["metadata"]["name"] in mine()), "a pool pod was scheduled outside quota"
    status = (env.kube.get("gdpvalpool", "kq-pool") or {}).get("status") or {}
    assert status.get("ready") == 0 and status.get("starting") == 2, status
    env.set_pod_quota(queue, 2)
    wait_until(lambda: ((env.kube.get("gdpvalpool", "kq-pool") or {}).get("status") or {}).get("ready") == 2, RUN_TIMEOUT, "the pool ready once quota freed")
    pods.stop(), workloads.stop()
    assert mine() <= admitted_owners(workloads.events)
    assert all(gated(p) for kind, p in pods.events if kind == "ADDED" and p["metadata"]["name"] in mine()), "a pool pod was created without Kueue's gate"
    env.kube.run("delete", "gdpvalpool", "kq-pool", "--wait=false")

"""The Controller's passes against an in-memory Kubernetes API and a local folder as the run's output.

The test plays kubelet, Job controller and the pods' own writes (run.json and manifest from the
prepare Job, result.json from sample pods, the submission from the assemble Job) through the same
storage layout the code reads. Passes are called directly: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from pathlib import Path

import pytest

from gdpval import contract
from gdpval.controller.effects.kube import Conflict
from gdpval.controller.effects.metrics import Metrics
from gdpval.controller.effects.s3 import read_segments
from gdpval.controller.effects.worker import Controller, Defaults, RunWorker
from gdpval.controller.pure import ledger
from gdpval.controller.pure import names as n
from gdpval.controller.pure.ledger import decode, merge, segments_of
from gdpval.controller.pure.policy import BLOCKED_RETRY_SECONDS, CONFLICT_RETRY_SECONDS, SECRET_RECHECK_SECONDS
from gdpval.storage import StorageError, layout
from gdpval.storage.local import LocalStorage
from gdpval.submission.build import build_submission
from support import runs
from support.fake_kube import Crash, FakeKube

NS, NAME, UID = "team", "r1", "0f3c9a7e-5b1d-4c2e-9a8f-1234567890ab"
RUN = layout.cluster_run(NS, NAME, UID)  # the run's folder in its output
TASKS = ("t1", "t2", "t3")
ENTRIES = runs.entries([runs.task(t) for t in TASKS])
SPEC = {"model": {"name": "m"}, "output": {"url": "s3://bucket/p"}, "parallelism": 2, "samples": {"retries": 1, "backoffSeconds": 10}}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


class Operator:
    """One GdpvalRun, the stand-in API, local storage, and a Controller that can be restarted."""

    def __init__(self, tmp_path: Path, spec: dict | None = None, open_storage=None):
        self.clock = Clock()
        self.kube = FakeKube(self.clock)
        self.storage = LocalStorage(tmp_path / "out")
        self.spec = spec or SPEC
        self.opened: list[tuple] = []
        self.open_storage = open_storage or self._open
        self.restart()

    @staticmethod
    def resolve(hosts):
        """The stand-in resolver: every endpoint name has one documentation address, except names under .invalid."""
        hosts = list(hosts)
        return {h: ["192.0.2.10"] for h in hosts if not h.endswith(".invalid")}, [h for h in hosts if h.endswith(".invalid")]

    def _open(self, output, creds):
        self.opened.append((output.url, creds))
        return self.storage

    def restart(self) -> None:
        """A new operator process: nothing remembered but what the API and storage hold."""
        self.controller = Controller(
            self.kube,
            Defaults("agent:1", "sandbox:1"),
            Metrics(),
            open_storage=self.open_storage,
            clock=self.clock,
            spawn=lambda call: call(),  # background deletions end within the pass, as the test's steps expect
        )
        self.controller.pods_index, self.controller.jobs_index = self.kube.pods_index, self.kube.jobs_index
        self.controller.effects.resolve = self.resolve
        self.worker = RunWorker((NS, NAME))
        self.worker.reset(UID)

    def body(self) -> dict:
        meta = {"name": NAME, "namespace": NS, "uid": UID, "generation": 1}
        return {"metadata": meta, "spec": self.spec, "status": self.kube.statuses.get((NS, NAME), {})}

    def reconcile(self) -> float:
        self.worker.body = self.body()
        return asyncio.run(self.controller.reconcile(self.worker))

    def run_pass(self) -> float:
        self.worker.body = self.body()
        return asyncio.run(self.controller.run_pass(self.worker))

    @property
    def state(self) -> str:
        return self.kube.statuses.get((NS, NAME), {}).get("state", "")

    def reasons(self) -> list[str]:
        return [e["reason"] for e in self.kube.events]

    def ledger(self):
        """The whole ledger: the archive segments the ConfigMap counts, then the ConfigMap."""
        data = self.kube.configmaps[(NS, n.ledger_name(NAME))]["data"]
        return merge(read_segments(self.storage, RUN, segments_of(data)), decode(data))[0]

    def job(self, component: str) -> dict | None:
        return self.kube.jobs.get((NS, n.job_name(NAME, component)))

    def sample_pods(self, *phases: str) -> list[dict]:
        pods = [p for p in self.kube.pods.values() if p["metadata"]["labels"][n.L_COMPONENT] == n.COMPONENT_SAMPLE]
        return [p for p in pods if not phases or p["status"]["phase"] in phases]

    # --- the world: what the Jobs and pods would do ------------------------------------------

    def play(self) -> None:
        """Every Job and pod that is running finishes and writes what it writes, results last."""
        self._finish(n.COMPONENT_PREPARE, lambda: runs.write_run(self.storage, RUN, ENTRIES))
        for pod in self.sample_pods("Pending", "Running"):
            labels = pod["metadata"]["labels"]
            entry = next(e for e in ENTRIES if e.sample.sample_id == pod["metadata"]["annotations"][n.A_SAMPLE_ID])
            attempt = int(labels[n.L_ATTEMPT])
            files = {"out.txt": b"answer"}
            runs.commit(self.storage, RUN, entry, attempt, runs.succeeded(entry, attempt, files), files)
            self.kube.set_pod_phase(NS, pod["metadata"]["name"], "Succeeded")
        self._finish(n.COMPONENT_ASSEMBLE, lambda: build_submission(self.storage, RUN))

    def _finish(self, component: str, work) -> None:
        job = self.job(component)
        if job is not None and job["status"].get("active"):
            work()
            self.kube.finish_job(NS, job["metadata"]["name"])

    def drive(self, passes: int = 20) -> None:
        """Pass, play, pass... until the run succeeded; a Crash restarts the operator."""
        for _ in range(passes):
            try:
                self.reconcile()
            except Crash:
                self.restart()
                continue
            if self.state == "Succeeded":
                return
            self.play()
        raise AssertionError(f"the run did not finish: {self.state}, events {self.reasons()}")


def test_a_run_goes_prepare_samples_assemble_succeeded(tmp_path):
    op = Operator(tmp_path)
    op.reconcile()
    assert op.state == "Preparing" and op.job(n.COMPONENT_PREPARE) is not None and op.ledger() == {}
    op.play()
    op.reconcile()
    assert op.state == "Running" and len(op.sample_pods("Pending")) == 2
    assert all(e.attempt == 1 for e in op.ledger().values()) and len(op.ledger()) == 2
    assert op.kube.network_policies, "network-disabled samples get their NetworkPolicy before pods run"
    op.play()
    op.reconcile()
    assert op.kube.statuses[(NS, NAME)]["samples"]["succeeded"] == 2 and len(op.sample_pods()) == 1
    op.play()
    op.reconcile()
    assert op.state == "Assembling" and op.job(n.COMPONENT_ASSEMBLE) is not None and not op.sample_pods()
    op.play()
    op.reconcile()
    status = op.kube.statuses[(NS, NAME)]
    assert op.state == "Succeeded" and status["submissionURI"] == op.storage.url(layout.submission(RUN))
    assert RUN == "team.r1-0f3c9a7e" and status["storageURI"] == op.storage.url(layout.run_root(RUN))
    assert status["samples"] == {"total": 3, "pending": 0, "running": 0, "succeeded": 3, "failed": 0, "retried": 0}
    assert op.reasons() == ["Preparing", "Running", "Assembling", "Succeeded"]
    assert sorted(op.kube.pods_created) == [(e.sample.sample_id, 1) for e in ENTRIES]
    assert not op.kube.jobs, "cleanupPolicy Delete removes the Jobs of a finished run"
    assert {url for url, _ in op.opened} == {"s3://bucket/p"}


def test_a_failed_status_write_posts_no_event(tmp_path):
    op = Operator(tmp_path)
    op.kube.fail("patch_status", RuntimeError("apiserver unavailable"))
    with pytest.raises(RuntimeError):
        op.reconcile()
    assert op.kube.events == [] and op.state == ""
    assert op.job(n.COMPONENT_PREPARE) is not None, "effects before the status write happened"
    op.reconcile()
    assert op.state == "Preparing" and op.reasons() == ["Preparing"]


def test_a_blocked_run_posts_its_event_only_after_the_status_says_so(tmp_path):
    def unreachable(output, creds):
        raise StorageError("connection refused")

    op = Operator(tmp_path, open_storage=unreachable)
    op.kube.fail("patch_status", RuntimeError("apiserver unavailable"))
    with pytest.raises(RuntimeError):
        op.reconcile()
    assert op.kube.events == [] and not op.kube.configmaps and not op.kube.jobs
    assert op.reconcile() == BLOCKED_RETRY_SECONDS
    ready = next(c for c in op.kube.statuses[(NS, NAME)]["conditions"] if c["type"] == "Ready")
    assert op.state == "Blocked" and ready["reason"] == "StorageUnavailable" and "connection refused" in ready["message"]
    assert op.reasons() == ["StorageUnavailable"]


def test_a_ledger_conflict_abandons_the_pass(tmp_path):
    op = Operator(tmp_path)
    op.reconcile()
    op.play()
    writes, events, calls = op.kube.status_writes, len(op.kube.events), len(op.kube.calls)
    op.kube.touch_ledger(NS, n.ledger_name(NAME))  # another writer, while the worker holds the ledger in memory
    with pytest.raises(Conflict):
        op.reconcile()
    assert "read_ledger" not in op.kube.calls[calls:], "the ledger kept in memory is written with its resourceVersion"
    assert op.kube.calls[calls:][-1] == "write_ledger", "nothing is done after the refused ledger write"
    assert not op.sample_pods() and op.ledger() == {} and not op.kube.network_policies
    assert (op.kube.status_writes, len(op.kube.events)) == (writes, events)
    op.kube.at("read_ledger", lambda: op.kube.touch_ledger(NS, n.ledger_name(NAME)), after=True)
    assert op.run_pass() == CONFLICT_RETRY_SECONDS and op.worker.errors == 0
    op.reconcile()
    assert len(op.sample_pods()) == 2 and op.state == "Running"


def test_a_crash_after_the_ledger_write_resumes_the_same_attempt(tmp_path):
    op = Operator(tmp_path)
    op.reconcile()
    op.play()
    op.kube.fail("write_ledger", Crash("killed"), after=True)
    with pytest.raises(Crash):
        op.reconcile()
    assert not op.sample_pods() and {e.attempt for e in op.ledger().values()} == {1}
    op.restart()
    op.reconcile()
    assert sorted(p["metadata"]["labels"][n.L_ATTEMPT] for p in op.sample_pods()) == ["1", "1"]
    assert Counter(op.kube.pods_created) == Counter({(e.sample.sample_id, 1): 1 for e in ENTRIES[:2]})


class CountingStorage(LocalStorage):
    """The run's output, counting the reads a pass makes (S3 GETs and LISTs in the cluster)."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.reads = 0

    def get_bytes(self, key: str) -> bytes:
        self.reads += 1
        return super().get_bytes(key)

    def list(self, prefix: str):
        self.reads += 1
        return super().list(prefix)


def test_refused_creates_are_not_probed_during_their_backoff(tmp_path):
    op = Operator(tmp_path)
    op.storage = storage = CountingStorage(tmp_path / "counted")
    op.reconcile()
    op.play()
    op.kube.refuse_pods = "exceeded quota: pods=0"
    op.reconcile()
    assert not op.sample_pods() and len(op.ledger()) == 2 and op.state == "Running"
    reads, gets = storage.reads, op.kube.calls.count("pod_exists")
    for _ in range(5):
        op.clock.now += 5
        op.reconcile()
    assert (storage.reads - reads, op.kube.calls.count("pod_exists") - gets) == (0, 0), "entries waiting out a refused create are not probed"
    ready = next(c for c in op.kube.statuses[(NS, NAME)]["conditions"] if c["type"] == "Running")
    assert ready["reason"] == "PodsNotStarting" and "exceeded quota" in ready["message"]
    op.kube.refuse_pods = None
    op.clock.now += 10
    reads, gets = storage.reads, op.kube.calls.count("pod_exists")
    op.reconcile()
    assert op.kube.calls.count("pod_exists") - gets == 2 and storage.reads - reads == 4, "one probe per lost entry: a pod GET, an S3 GET and a LIST"
    assert len(op.sample_pods("Pending")) == 2


def _calls_of_a_clean_run(tmp_path: Path) -> int:
    op = Operator(tmp_path)
    op.drive()
    return len(op.kube.calls)


@pytest.mark.parametrize("batch", [ledger.ARCHIVE_BATCH, 1], ids=["kept", "archived"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_at_any_call_never_gives_an_attempt_a_second_pod(tmp_path, monkeypatch, after, batch):
    """Also with every ended entry moved to S3 at once (a batch of 1): segments and ConfigMap agree after any crash."""
    monkeypatch.setattr(ledger, "ARCHIVE_BATCH", batch)
    total = _calls_of_a_clean_run(tmp_path / "clean")
    assert total > 20
    for call in range(1, total + 1):
        op = Operator(tmp_path / f"crash-{call}")
        op.kube.crash_at_call = (call, after)
        op.drive()
        created = Counter(op.kube.pods_created)
        assert set(created.values()) == {1}, f"crash at call {call}: an attempt got a second pod: {created}"
        assert {e.attempt for e in op.ledger().values()} == {1}, f"crash at call {call} cost an attempt"
        assert len(created) == len(ENTRIES) and op.kube.statuses[(NS, NAME)]["samples"]["succeeded"] == len(ENTRIES)
        op.kube.crash_at_call = None
        op.reconcile()
        jobs = Counter(op.kube.jobs_created)
        assert jobs == Counter({n.COMPONENT_PREPARE: 1, n.COMPONENT_ASSEMBLE: 1}), f"crash at call {call} re-created a Job: {jobs}"
        assert not op.kube.jobs, f"crash at call {call} left a Job of the finished run"


def test_a_crash_before_a_failed_run_stops_its_job_stops_it_after_the_restart(tmp_path):
    """The deadline passes while the assemble Job runs: the status says Failed before the Job goes."""
    op = Operator(tmp_path, spec={**SPEC, "deadlineSeconds": 3600})
    while op.state != "Assembling":
        op.reconcile()
        if op.state != "Assembling":
            op.play()
    assert op.job(n.COMPONENT_ASSEMBLE)["status"]["active"]
    op.clock.now += 3600
    op.kube.fail("delete_job", Crash("killed"))
    with pytest.raises(Crash):
        op.reconcile()
    assert op.state == "Failed", "the terminal status is written before the Jobs are deleted"
    op.restart()
    op.reconcile()
    assert op.state == "Failed" and not op.kube.jobs, "a restarted operator stops the Job of a failed run"
    assert Counter(op.kube.jobs_created) == Counter({n.COMPONENT_PREPARE: 1, n.COMPONENT_ASSEMBLE: 1})


SECRET_SPEC = {
    **SPEC,
    "model": {"name": "m", "apiKeySecretRef": {"name": "key", "key": "k"}},
    "output": {"url": "s3://bucket/p", "credentialsSecret": {"name": "s3"}},
}


def _with_secrets(tmp_path: Path) -> Operator:
    op = Operator(tmp_path, spec=SECRET_SPEC)
    op.kube.add_secret(NS, "key", {"k": "sk-1"})
    op.kube.add_secret(NS, "s3", {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    return op


def test_steady_passes_read_neither_the_ledger_nor_the_secrets(tmp_path):
    op = _with_secrets(tmp_path)
    op.reconcile()
    op.play()
    op.reconcile()
    assert op.state == "Running" and len(op.sample_pods("Pending")) == 2
    calls = len(op.kube.calls)
    for _ in range(30):
        op.clock.now += SECRET_RECHECK_SECONDS / 30
        op.reconcile()
    made = Counter(op.kube.calls[calls:])
    assert made["read_ledger"] == 0, "the ledger stays in memory between passes"
    assert made["secret_data"] == 2, f"each Secret once in {SECRET_RECHECK_SECONDS:.0f}s, not on each of 30 passes: {made}"
    op.kube.secrets.pop((NS, "key"))
    op.clock.now += SECRET_RECHECK_SECONDS
    op.reconcile()
    ready = next(c for c in op.kube.statuses[(NS, NAME)]["conditions"] if c["type"] == "Ready")
    assert op.state == "Blocked" and ready["reason"] == "SecretNotFound"


def test_a_secret_named_by_a_changed_spec_is_checked_on_the_next_pass(tmp_path):
    op = _with_secrets(tmp_path)
    op.reconcile()
    op.play()
    op.reconcile()
    assert op.state == "Running"
    op.spec = {**SECRET_SPEC, "model": {"name": "m", "apiKeySecretRef": {"name": "rotated", "key": "k"}}}
    op.clock.now += 1
    op.reconcile()
    ready = next(c for c in op.kube.statuses[(NS, NAME)]["conditions"] if c["type"] == "Ready")
    assert op.state == "Blocked" and ready["reason"] == "SecretNotFound" and "rotated" in ready["message"]
    op.kube.add_secret(NS, "rotated", {"k": "sk-2"})
    calls = len(op.kube.calls)
    op.clock.now += 1
    op.reconcile()
    assert op.state == "Running" and op.kube.calls[calls:].count("secret_data") == 2, "a missing Secret is looked for on every pass until it exists"


def test_the_ledger_is_read_again_after_an_operator_restart(tmp_path):
    op = Operator(tmp_path)
    op.reconcile()
    op.play()
    op.reconcile()
    op.restart()
    calls = len(op.kube.calls)
    op.reconcile()
    op.reconcile()
    assert op.kube.calls[calls:].count("read_ledger") == 1 and len(op.sample_pods()) == 2


def test_a_prepare_job_refusing_another_runs_storage_fails_the_run_with_storage_conflict(tmp_path):
    op = Operator(tmp_path)
    op.reconcile()
    job = op.job(n.COMPONENT_PREPARE)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][3] == RUN
    message = f"error: {op.storage.url(layout.run_json(RUN))} belongs to GdpvalRun other/r1 (uid 1), not to ...: delete that folder ..."
    terminated = {"exitCode": contract.EXIT_RUN_CONFLICT, "reason": "Error", "message": message}
    pod = {"metadata": {"name": "r1-prepare-x", "namespace": NS, "labels": job["spec"]["template"]["metadata"]["labels"]}}
    op.kube.pods[(NS, "r1-prepare-x")] = {**pod, "status": {"phase": "Failed", "containerStatuses": [{"name": "prepare", "state": {"terminated": terminated}}]}}
    op.kube.finish_job(NS, job["metadata"]["name"], ok=False)
    op.reconcile()
    ready = next(c for c in op.kube.statuses[(NS, NAME)]["conditions"] if c["type"] == "Ready")
    assert op.state == "Failed" and ready["reason"] == "StorageConflict"
    assert (
        ready["message"].startswith(f"the run's storage {op.storage.url(layout.run_root(RUN))} is not this run's: ")
        and "delete that folder" in ready["message"]
    )
    assert op.kube.statuses[(NS, NAME)]["storageURI"] == op.storage.url(layout.run_root(RUN))


def test_a_run_started_by_an_older_operator_keeps_its_folder(tmp_path):
    op = Operator(tmp_path)
    runs.write_run(op.storage, NAME, ENTRIES)
    op.kube.statuses[(NS, NAME)] = {"state": "Running", "startTime": "2023-11-14T22:00:00Z", "datasetRevision": "a" * 40}
    for _ in range(2):
        op.reconcile()
        assert op.kube.statuses[(NS, NAME)]["storageURI"] == op.storage.url(layout.run_root(NAME))
    commands = [p["spec"]["containers"][0]["command"] for p in op.sample_pods()]
    assert len(commands) == 2 and all(cmd[cmd.index("--run-name") + 1] == NAME for cmd in commands)


def test_sample_pods_get_the_token_secret_and_an_egress_policy_by_address_before_they_exist(tmp_path):
    spec = {**SPEC, "model": {"name": "m", "baseURL": "http://model.invalid:8000/v1"}, "output": {"url": "s3://bucket/p", "endpoint": "http://s3.example:9000"}}
    op = Operator(tmp_path, spec)
    op.kube.at("create_pod", lambda: calls.append(set(op.kube.secrets) | set(op.kube.network_policies)))
    calls: list[set] = []
    op.reconcile()
    op.play()
    op.reconcile()
    secret, policy = (NS, n.token_secret_name(NAME)), (NS, n.network_policy_name(NAME))
    assert calls and all({secret, policy} <= seen for seen in calls), "the Secret and the policy exist before any pod"
    token = op.kube.secret_data(*secret)[contract.TOKEN_KEY]
    plain = base64.b64decode(token).decode()
    assert len(plain) >= 32 and all(plain not in str(pod) for pod in op.sample_pods())
    egress = op.kube.network_policies[policy]["spec"]["egress"]
    assert [r["to"] for r in egress if r.get("ports") == [{"protocol": "TCP", "port": 9000}]] == [[{"ipBlock": {"cidr": "192.0.2.10/32"}}]]
    assert not [r for r in egress if r.get("ports") == [{"protocol": "TCP", "port": 8000}]], "the unresolved model host opens nothing"
    [warning] = [e for e in op.kube.events if e["reason"] == "EndpointNotResolved"]
    assert warning["type"] == "Warning" and "model.invalid" in warning["message"]
    op.restart()
    op.kube.add_secret(NS, n.token_secret_name(NAME), {contract.TOKEN_KEY: "kept"})
    op.play()
    op.reconcile()
    assert op.kube.secret_data(*secret)[contract.TOKEN_KEY] == base64.b64encode(b"kept").decode(), "running pods keep reading the same token"


def test_a_run_with_the_network_on_gets_the_metadata_block(tmp_path):
    op = Operator(tmp_path, {**SPEC, "sandbox": {"network": True}})
    op.reconcile()
    op.play()
    op.reconcile()
    [policy] = op.kube.network_policies.values()
    assert policy["metadata"]["name"] == n.network_policy_name(NAME, network=True)
    assert "169.254.0.0/16" in str(policy["spec"]["egress"])


def test_ended_entries_leave_the_configmap_for_s3_and_come_back_after_a_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "ARCHIVE_BATCH", 2)
    op = Operator(tmp_path)
    for _ in range(3):
        op.reconcile()
        op.play()
    op.reconcile()
    data = op.kube.configmaps[(NS, n.ledger_name(NAME))]["data"]
    assert set(data) == {ledger.SEGMENTS_KEY, "t3-r0"} and segments_of(data) == 1, "two ended entries went to S3 together, the third waits for a batch"
    assert {e.outcome for e in op.ledger().values()} == {ledger.Outcome.succeeded} and len(op.ledger()) == 3
    op.restart()
    op.reconcile()
    status = op.kube.statuses[(NS, NAME)]
    assert op.state == "Assembling" and status["samples"]["succeeded"] == 3 and sorted(op.kube.pods_created) == [(e.sample.sample_id, 1) for e in ENTRIES]


def test_a_finished_run_is_deleted_once_its_ttl_is_over(tmp_path):
    op = Operator(tmp_path, spec={**SPEC, "ttlSecondsAfterFinished": 600})
    op.drive()
    delay = op.run_pass()
    assert op.kube.deleted_runs == [] and delay == 60.0, "passes go on at the resync pace until the TTL"
    op.clock.now += 600
    op.run_pass()
    assert op.kube.deleted_runs == [(NS, NAME)] and op.state == "Succeeded"

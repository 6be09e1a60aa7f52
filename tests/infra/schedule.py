"""Ready-first test scheduling for `make test`'s xdist workers.

Setup's background job builds the cluster and the full runtime while the session runs. Handing
tests out in collection order leaves a worker blocked on a build lock whenever it reaches a test
whose build is not done, and worksteal makes it worse: an idle worker steals the tail of the
other's queue, which is the cluster tier. Here each worker holds at most two tests, and the next
test sent is the first pending one of the first phase in `READY_ORDER` whose build is ready (the
cluster tier is the session's long pole, and the cluster-only worker carries it while the others
run the image tests), else of the first phase in `WAITING_ORDER` still building: a worker with
nothing ready waits in the cluster fixture (which takes setup's build locks) rather than on the
runtime, which a fresh machine finishes about six minutes after the cluster, and on Kueue last.
The folder says what a test waits for (`phase_of`); tests/conftest.py refuses a test in the wrong one.
Workers past the first `GENERAL_WORKERS` take the cluster tier's tests only: more hands where tests
wait on pods, and no more tests beside setup's builds, which compete for the CPU before the cluster
is up. Setup's background job writes a marker per build once it is ready (`hack/setup.sh`); without
markers (no background job) the tests needing no build go first, then the cluster tier, then the rest.

xdist's controller acts only on its workers' events, so a cluster-only worker idle since the start
would be sent nothing until some test completes: in a fresh run the others sat in long build waits
and the cluster tier started 6.6 min after the cluster was up. A thread watches for the cluster's
marker and then puts an event of its own in the controller's queue; the controller's thread, the
only one that touches the schedule, hands out the tests. A worker runs a test only once it holds
the next one or the word to stop, so the cluster-only worker is told to stop as soon as no cluster
test is left to send: in CI the marker came while the first tests were being handed out, a general
worker took two cluster tests and the cluster-only worker held the third until the session's end.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from xdist.scheduler.load import LoadScheduling

from infra.paths import REPO_ROOT

NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER, NEEDS_KUEUE = 0, 1, 2, 3
CLUSTER_PHASES = frozenset({NEEDS_CLUSTER, NEEDS_KUEUE})  # the cluster tier: tests marked cluster
READY_DIR = REPO_ROOT / ".cache" / "setup-ready"
MARKERS = {NEEDS_RUNTIME: "runtime", NEEDS_CLUSTER: "cluster", NEEDS_KUEUE: "kueue"}
GENERAL_WORKERS = 2
IMAGE_FIXTURES = frozenset({"full_runtime", "full_image"})  # tests/conftest.py and tests/cluster/conftest.py
READY_EVENT = "cluster_ready"  # the controller calls its `worker_<event>` attribute
RUNS_WITH = 2  # a worker runs a test once it holds the next one too, or the word to stop


def phase_of(nodeid: str) -> int:
    """What a test waits for, from its folder: the cluster tier's tests are all in tests/cluster, those
    running Kueue's manager in tests/cluster/kueue."""
    if nodeid.startswith("tests/cluster/kueue/"):
        return NEEDS_KUEUE
    if nodeid.startswith("tests/cluster/"):
        return NEEDS_CLUSTER
    return NEEDS_RUNTIME if nodeid.startswith("tests/images/") else NEEDS_NOTHING


def misplaced(nodeid: str, marked_cluster: bool, fixtures: Collection[str]) -> bool:
    """A test whose folder does not say what it waits for: the scheduler sees only test ids."""
    phase = phase_of(nodeid)
    waits_for_an_image = not IMAGE_FIXTURES.isdisjoint(fixtures)
    return (phase in CLUSTER_PHASES) != marked_cluster or (waits_for_an_image and phase == NEEDS_NOTHING)


def ready_phases(ready_dir: Path = READY_DIR) -> frozenset[int]:
    """The phases whose build setup's background job has marked ready (and the one needing nothing);
    Kueue's tests need the cluster too."""
    ready = {NEEDS_NOTHING} | {phase for phase, name in MARKERS.items() if (ready_dir / name).exists()}
    return frozenset(ready if NEEDS_CLUSTER in ready else ready - {NEEDS_KUEUE})


# Ready phases in the order a general worker takes them: the image tests as soon as the runtime is
# ready, since the cluster-only worker carries the cluster tier meanwhile (left for last, they were a
# fresh run's tail: two workers ran them for 2.4 min after the cluster tier's end); Kueue's tests, the
# cluster tier's longest, as soon as Kueue is built (left for last, they were the next fresh run's tail).
READY_ORDER = (NEEDS_RUNTIME, NEEDS_KUEUE, NEEDS_CLUSTER, NEEDS_NOTHING)
# Phases not ready yet, in the order a worker with nothing ready waits for them: the cluster, the long
# pole, first; Kueue, built once the cluster is up, last.
WAITING_ORDER = (NEEDS_CLUSTER, NEEDS_RUNTIME, NEEDS_KUEUE)


def pick(pending: Sequence[int], phases: Sequence[int], ready: Collection[int], count: int, cluster_only: bool = False) -> list[int]:
    """The next `count` pending test indexes: ready phases in `READY_ORDER`, then the phases whose
    build is not ready yet in `WAITING_ORDER`, each phase in collection order. `cluster_only`: the
    cluster tier's tests once the cluster is ready, else none."""

    def rank(index: int) -> int:
        phase = phases[index]
        return READY_ORDER.index(phase) if phase in ready else len(READY_ORDER) + WAITING_ORDER.index(phase)

    if cluster_only:
        pending = [index for index in pending if phases[index] in CLUSTER_PHASES] if NEEDS_CLUSTER in ready else []
    return heapq.nsmallest(count, pending, key=rank)  # stable: ties keep the collection's order


class ReadyFirstScheduling(LoadScheduling):
    """xdist's load scheduling with one test sent at a time, chosen by `pick`."""

    def __init__(self, config, log=None, ready_dir: Path = READY_DIR) -> None:
        super().__init__(config, log)
        self.maxschedchunk = 1
        self._phases: list[int] = []
        self._ready_dir = ready_dir
        controller = config.pluginmanager.getplugin("dsession")
        if controller is not None:
            setattr(controller, f"worker_{READY_EVENT}", self._wake_idle)
            watch = (ready_dir / MARKERS[NEEDS_CLUSTER], controller.queue.put)
            threading.Thread(target=_announce_when_present, args=watch, name="cluster-marker", daemon=True).start()

    def schedule(self) -> None:
        super().schedule()
        self._wake_idle()  # a first hand-out smaller than two tests a worker leaves one idle

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        super().mark_test_complete(node, item_index, duration)
        self._wake_idle()

    def _wake_idle(self) -> None:
        """Idle workers are offered tests, not only the one that sent the event: a cluster-only worker
        sits idle until the cluster is ready, and a worker holding one test waits for a second before
        it runs the first. Before the collection is in, there is nothing to offer (and xdist would
        shut an idle worker down)."""
        if self.collection is None:
            return
        for node in self.nodes:
            if len(self.node2pending[node]) < RUNS_WITH:
                self.check_schedule(node)

    def _send_tests(self, node, num: int) -> None:
        if not self._phases:
            self._phases = [phase_of(nodeid) for nodeid in self.collection]
        cluster_only = int(node.gateway.id.removeprefix("gw")) >= GENERAL_WORKERS
        ready = ready_phases(self._ready_dir)
        chosen = pick(self.pending, self._phases, ready, num, cluster_only)
        if chosen:
            taken = set(chosen)
            self.pending[:] = [index for index in self.pending if index not in taken]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)
        if cluster_only and NEEDS_CLUSTER in ready and CLUSTER_PHASES.isdisjoint(self._phases[index] for index in self.pending):
            node.shutdown()  # no cluster test left for it: it runs what it holds now, not when the session ends


def _announce_when_present(marker: Path, put, period: float = 1.0) -> None:
    """Put the ready event in the controller's queue once `marker` exists (a daemon thread: it ends
    with the session if the marker never comes)."""
    while not marker.exists():
        time.sleep(period)
    put((READY_EVENT, {}))

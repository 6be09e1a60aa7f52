"""Ready-first test scheduling for `make test`'s xdist workers.

Setup's background job builds the cluster and the full runtime while the session runs. Handing
tests out in collection order leaves a worker blocked on a build lock whenever it reaches a test
whose build is not done, and worksteal makes it worse: an idle worker steals the tail of the
other's queue, which is the cluster tier. Here each worker holds at most two tests, and the next
test sent is the first pending one of the highest phase whose build is ready (the cluster tier is
the session's long pole and waits on pods more than on the CPU), else the first pending one.
Workers past the first `GENERAL_WORKERS` take the cluster tier's tests only: more hands where tests
wait on pods, and no more tests beside setup's builds, which compete for the CPU before the cluster
is up. Setup's background job writes a marker per build once it is ready (`hack/setup.sh`); without
markers (no background job) the order is the collection's.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from pathlib import Path

from xdist.scheduler.load import LoadScheduling

from infra.paths import REPO_ROOT

NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER = 0, 1, 2
READY_DIR = REPO_ROOT / ".cache" / "setup-ready"
MARKERS = {NEEDS_RUNTIME: "runtime", NEEDS_CLUSTER: "cluster"}
GENERAL_WORKERS = 2


def phase_of(nodeid: str) -> int:
    """What a test waits for, from its folder: the cluster tier's tests are all in tests/cluster."""
    if nodeid.startswith("tests/cluster/"):
        return NEEDS_CLUSTER
    return NEEDS_RUNTIME if nodeid.startswith("tests/images/") else NEEDS_NOTHING


def ready_phases(ready_dir: Path = READY_DIR) -> frozenset[int]:
    """The phases whose build setup's background job has marked ready (and the one needing nothing)."""
    return frozenset({NEEDS_NOTHING} | {phase for phase, name in MARKERS.items() if (ready_dir / name).exists()})


def pick(pending: Sequence[int], phases: Sequence[int], ready: Collection[int], count: int, cluster_only: bool = False) -> list[int]:
    """The next `count` pending test indexes: ready phases highest first, each in collection order,
    then the tests whose build is not ready yet, in collection order. `cluster_only`: the cluster
    tier's tests once the cluster is ready, else none."""

    def rank(index: int) -> int:
        phase = phases[index]
        return -phase if phase in ready else 1

    if cluster_only:
        pending = [index for index in pending if phases[index] == NEEDS_CLUSTER] if NEEDS_CLUSTER in ready else []
    return heapq.nsmallest(count, pending, key=rank)  # stable: ties keep the collection's order


class ReadyFirstScheduling(LoadScheduling):
    """xdist's load scheduling with one test sent at a time, chosen by `pick`."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self.maxschedchunk = 1
        self._phases: list[int] = []

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        """Idle workers are looked at too, not only the one that finished: a cluster-only worker sits
        idle until the cluster is ready and would otherwise never be asked again."""
        super().mark_test_complete(node, item_index, duration)
        for other in self.nodes:
            if other is not node and not self.node2pending[other]:
                self.check_schedule(other)

    def _send_tests(self, node, num: int) -> None:
        if not self._phases:
            self._phases = [phase_of(nodeid) for nodeid in self.collection]
        cluster_only = int(node.gateway.id.removeprefix("gw")) >= GENERAL_WORKERS
        chosen = pick(self.pending, self._phases, ready_phases(), num, cluster_only)
        if chosen:
            taken = set(chosen)
            self.pending[:] = [index for index in self.pending if index not in taken]
            self.node2pending[node].extend(chosen)
            node.send_runtest_some(chosen)

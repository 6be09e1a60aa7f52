"""The ready-first scheduler's choice (tests/infra/schedule.py); pure, no worker."""

from __future__ import annotations

from infra.schedule import NEEDS_CLUSTER, NEEDS_NOTHING, NEEDS_RUNTIME, phase_of, pick, ready_phases

PHASES = [NEEDS_NOTHING, NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_RUNTIME, NEEDS_CLUSTER, NEEDS_CLUSTER]


def test_with_nothing_ready_the_order_is_the_collections() -> None:
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING}, 3) == [0, 1, 2]
    assert pick([2, 4, 5], PHASES, {NEEDS_NOTHING}, 2) == [2, 4]


def test_a_ready_cluster_goes_first_then_the_runtime_then_the_rest() -> None:
    ready = {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}
    assert pick([0, 1, 2, 3, 4, 5], PHASES, ready, 6) == [4, 5, 2, 3, 0, 1]
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_CLUSTER}, 4) == [4, 5, 0, 1]


def test_tests_waiting_on_a_build_come_last_and_none_is_lost() -> None:
    assert pick([3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_RUNTIME}, 5) == [3, 4, 5]
    assert pick([], PHASES, {NEEDS_NOTHING}, 2) == []


def test_phases_come_from_the_folders() -> None:
    assert phase_of("tests/cluster/test_helm.py::test_install") == NEEDS_CLUSTER
    assert phase_of("tests/images/test_sandbox_full.py::test_checks[podman]") == NEEDS_RUNTIME
    assert phase_of("tests/unit/test_cluster_names.py::test_x") == NEEDS_NOTHING


def test_ready_phases_follow_setups_markers(tmp_path) -> None:
    assert ready_phases(tmp_path) == {NEEDS_NOTHING}
    (tmp_path / "cluster").touch()
    assert ready_phases(tmp_path) == {NEEDS_NOTHING, NEEDS_CLUSTER}
    (tmp_path / "runtime").touch()
    assert ready_phases(tmp_path) == {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}


def test_a_cluster_only_worker_takes_the_cluster_tier_once_it_is_ready_and_nothing_else() -> None:
    everything = {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_RUNTIME}, 2, cluster_only=True) == []
    assert pick([0, 2, 5], PHASES, everything, 2, cluster_only=True) == [5]
    assert pick([0, 1, 2, 3], PHASES, everything, 2, cluster_only=True) == []

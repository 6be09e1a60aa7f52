"""The ready-first scheduler's choice (tests/infra/schedule.py); pure, no worker."""

from __future__ import annotations

from infra.schedule import NEEDS_CLUSTER, NEEDS_KUEUE, NEEDS_NOTHING, NEEDS_RUNTIME, misplaced, phase_of, pick, ready_phases

PHASES = [NEEDS_NOTHING, NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_RUNTIME, NEEDS_CLUSTER, NEEDS_CLUSTER]


def test_with_no_build_ready_the_tests_needing_none_go_first_then_the_cluster_tier() -> None:
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING}, 3) == [0, 1, 4]
    assert pick([2, 3, 4, 5], PHASES, {NEEDS_NOTHING}, 3) == [4, 5, 2]


def test_a_ready_runtime_goes_first_then_a_ready_cluster_then_the_rest() -> None:
    ready = {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}
    assert pick([0, 1, 2, 3, 4, 5], PHASES, ready, 6) == [2, 3, 4, 5, 0, 1]
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_CLUSTER}, 4) == [4, 5, 0, 1]


def test_kueue_tests_wait_last_and_once_kueue_is_built_go_before_the_rest_of_the_cluster_tier() -> None:
    phases = [NEEDS_KUEUE, NEEDS_CLUSTER, NEEDS_RUNTIME, NEEDS_KUEUE]
    assert pick([0, 1, 2, 3], phases, {NEEDS_NOTHING}, 4) == [1, 2, 0, 3]
    assert pick([0, 1, 2, 3], phases, {NEEDS_NOTHING, NEEDS_CLUSTER}, 4) == [1, 2, 0, 3]
    assert pick([0, 1, 2, 3], phases, {NEEDS_NOTHING, NEEDS_CLUSTER, NEEDS_KUEUE}, 4) == [0, 3, 1, 2]
    assert pick([0, 1, 2, 3], phases, {NEEDS_NOTHING, NEEDS_CLUSTER, NEEDS_KUEUE}, 4, cluster_only=True) == [0, 3, 1]


def test_tests_waiting_on_a_build_come_last_and_none_is_lost() -> None:
    assert pick([3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_RUNTIME}, 5) == [3, 4, 5]
    assert pick([], PHASES, {NEEDS_NOTHING}, 2) == []


def test_phases_come_from_the_folders() -> None:
    assert phase_of("tests/cluster/test_helm.py::test_install") == NEEDS_CLUSTER
    assert phase_of("tests/cluster/kueue/test_kueue.py::test_quota") == NEEDS_KUEUE
    assert phase_of("tests/images/test_sandbox_full.py::test_checks[podman]") == NEEDS_RUNTIME
    assert phase_of("tests/unit/test_cluster_names.py::test_x") == NEEDS_NOTHING


def test_ready_phases_follow_setups_markers(tmp_path) -> None:
    assert ready_phases(tmp_path) == {NEEDS_NOTHING}
    (tmp_path / "cluster").touch()
    assert ready_phases(tmp_path) == {NEEDS_NOTHING, NEEDS_CLUSTER}
    (tmp_path / "runtime").touch()
    assert ready_phases(tmp_path) == {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}
    (tmp_path / "kueue").touch()
    assert NEEDS_KUEUE in ready_phases(tmp_path)
    (tmp_path / "cluster").unlink()
    assert ready_phases(tmp_path) == {NEEDS_NOTHING, NEEDS_RUNTIME}  # Kueue's tests need the cluster too


def test_a_cluster_only_worker_takes_the_cluster_tier_once_it_is_ready_and_nothing_else() -> None:
    everything = {NEEDS_NOTHING, NEEDS_RUNTIME, NEEDS_CLUSTER}
    assert pick([0, 1, 2, 3, 4, 5], PHASES, {NEEDS_NOTHING, NEEDS_RUNTIME}, 2, cluster_only=True) == []
    assert pick([0, 2, 5], PHASES, everything, 2, cluster_only=True) == [5]
    assert pick([0, 1, 2, 3], PHASES, everything, 2, cluster_only=True) == []


def test_a_test_in_the_wrong_folder_for_what_it_waits_for_is_misplaced() -> None:
    assert misplaced("tests/integration/test_x.py::test_y", False, ["tmp_path", "full_runtime"])
    assert misplaced("tests/integration/test_x.py::test_y", True, [])
    assert misplaced("tests/cluster/test_x.py::test_y", False, [])
    assert not misplaced("tests/images/test_x.py::test_y", False, ["full_runtime"])
    assert not misplaced("tests/cluster/test_x.py::test_y", True, ["full_image"])
    assert not misplaced("tests/cluster/kueue/test_x.py::test_y", True, [])
    assert misplaced("tests/cluster/kueue/test_x.py::test_y", False, [])
    assert not misplaced("tests/integration/test_x.py::test_y", False, ["s3", "tmp_path"])

"""The order the scheduler keeps within a tier (tests/conftest.py): tests waiting on one of setup's long
builds come after the tier's others, so that no worker sits idle on a build while others are ready."""

from __future__ import annotations

import subprocess
import sys

from infra.paths import REPO_ROOT


def _collected(*paths: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_kueue_tests_come_after_the_cluster_tests_waiting_on_no_build() -> None:
    """Kueue's folder sorts before the rest of tests/cluster, and the control plane's Kueue test before
    test_smoke.py's: only the phase (tests/cluster/kueue) and the `kueue` fixture's wait put them last."""
    order = _collected(
        "tests/cluster/kueue/test_kueue.py",
        "tests/cluster/test_operator.py",
        "tests/cluster/test_operator_controlplane.py",
        "tests/cluster/test_smoke.py",
    )
    kueue = [i for i, nodeid in enumerate(order) if "kueue" in nodeid]
    plain = [i for i, nodeid in enumerate(order) if "kueue" not in nodeid]
    assert len(kueue) >= 6 and plain, order
    assert min(kueue) > max(plain), order


def test_the_long_tests_start_their_tier_and_keep_the_build_waits_last() -> None:
    """The stress run, last of its folder by name, comes before the smoke tests; the full image's tests
    still wait behind every test needing no build, long or not."""
    order = _collected("tests/cluster/test_smoke.py", "tests/cluster/test_stress_cluster.py", "tests/cluster/test_sandbox_full_pod.py")
    stress = order.index("tests/cluster/test_stress_cluster.py::test_a_stress_run_succeeds_with_a_complete_package")
    smoke = [i for i, nodeid in enumerate(order) if "test_smoke.py" in nodeid]
    full = [i for i, nodeid in enumerate(order) if "test_sandbox_full_pod.py" in nodeid]
    assert smoke and full, order
    assert stress < min(smoke) and max(smoke) < min(full), order

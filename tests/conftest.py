"""Shared fixtures: the sample dataset's path (`sample_dataset`) and its copy with stand-in reference
files (`standin_dataset`), and fixtures backed by real servers: the scripted model (`scripted_model`),
MinIO (`s3`, `s3_env`) and the local cluster (`cluster`, `cluster_s3`). Nothing starts
until a test asks for it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

# `infra` is importable whether or not tests/ becomes a package later.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from gdpval.fakemodel.server import start_background  # noqa: E402
from gdpval.render.cache import CACHE_ENV  # noqa: E402
from infra import cluster as local_cluster  # noqa: E402
from infra import schedule  # noqa: E402
from infra.minio import MinioServer, ensure_minio_binary  # noqa: E402
from infra.paths import HACK, cache_dir  # noqa: E402
from support.standins import make_standin_dataset, sample_dataset_path  # noqa: E402

pytest_plugins = ("support.attack_run",)

_AWS_VARS_TO_CLEAR = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")
_TEARDOWN_MARK = "cluster_teardown"
# The test timeline's file, in the session's controlling process only (set by pytest_configure).
_timeline: dict[str, Path] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", f"{_TEARDOWN_MARK}: stops the shared cluster; runs after every other test")
    timeline = os.environ.get("GDPVAL_TEST_TIMELINE")
    if timeline and not hasattr(config, "workerinput"):  # an xdist worker's config has workerinput
        _timeline["path"] = Path(timeline)
        _timeline["path"].parent.mkdir(parents=True, exist_ok=True)


@pytest.fixture(autouse=True)
def render_cache(tmp_path_factory, monkeypatch):
    """Renderings cached in the session's temporary folder, never in the user's cache."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path_factory.getbasetemp() / "render-cache"))


def _phase(item: pytest.Item) -> int:
    """Tests needing nothing built first, so they run while setup's background builds do (`make test`);
    then the image tests, the cluster tests, and last the teardown test, which stops the cluster."""
    if item.get_closest_marker(_TEARDOWN_MARK):
        return max(schedule.MARKERS) + 1
    return schedule.phase_of(item.nodeid)


# Within a tier, tests whose fixtures wait on one of setup's builds come after those that wait on
# none: MinIO's build first, then the full image's and Kueue's (the longest: on a fresh machine Kueue
# builds from the cluster's start for about 11 minutes, and its tests, taken earlier, held a worker
# idle for up to 7.5 of them); the scheduler keeps this order.
_BUILD_WAITS = {"minio_binary": 1, "full_runtime": 2, "full_image": 2, "kueue": 2}
_LONG_BUILD = 2


def _order(item: pytest.Item) -> tuple[int, bool, bool, int]:
    """Within a tier, the tests marked long first, unless they wait on the full image or Kueue (MinIO is
    built before the cluster is up): in collection order, the cluster stress run started 31 minutes
    into the cluster tier and ended it, 8 minutes after the cores had stopped being busy."""
    build_wait = max((_BUILD_WAITS.get(name, 0) for name in getattr(item, "fixturenames", ())), default=0)
    return _phase(item), build_wait >= _LONG_BUILD, item.get_closest_marker("long") is None, build_wait


def pytest_collection_modifyitems(config, items):
    items.sort(key=_order)
    misplaced = [item.nodeid for item in items if _misplaced(item)]
    if misplaced:
        raise pytest.UsageError(
            f"tests marked cluster belong in tests/cluster, and tests using the full image or runtime in tests/images or "
            f"tests/cluster, where the scheduler looks: {misplaced}"
        )


def _misplaced(item: pytest.Item) -> bool:
    marked = bool(item.get_closest_marker("cluster") or item.get_closest_marker(_TEARDOWN_MARK))
    return schedule.misplaced(item.nodeid, marked, getattr(item, "fixturenames", ()))


def pytest_xdist_make_scheduler(config, log):
    """`--dist load` runs ready-first (tests/infra/schedule.py); the other modes stay xdist's own."""
    if config.getoption("dist") == "load":
        return schedule.ReadyFirstScheduling(config, log)
    return None


def pytest_runtest_logreport(report) -> None:
    """With GDPVAL_TEST_TIMELINE set (`make test`), one line per test phase in that file: start and
    stop (epoch s), phase, worker, outcome, test; the controller writes it, so lines never interleave."""
    timeline = _timeline.get("path")
    if timeline:
        worker = report.node.gateway.id if getattr(report, "node", None) else "-"
        fields = (f"{report.start:.1f}", f"{report.stop:.1f}", report.when, worker, report.outcome, report.nodeid)
        with timeline.open("a", encoding="utf-8") as out:
            out.write("\t".join(fields) + "\n")


@pytest.fixture(scope="session")
def sample_dataset() -> Path:
    """The 12-task GDPval sample shared beside the checkout (parquet only; see support.standins)."""
    return sample_dataset_path()


@pytest.fixture(scope="session")
def standin_dataset(sample_dataset, tmp_path_factory) -> Path:
    """The sample with stand-in reference files; read-only for every test, so one copy serves the session."""
    return make_standin_dataset(sample_dataset, tmp_path_factory.mktemp("standin-dataset"))


@pytest.fixture(scope="module")
def scripted_model():
    """The scripted model over HTTP, one per module: a module that holds or counts replies sees only its own requests."""
    with start_background(host="127.0.0.1", port=0) as server:
        yield server


@pytest.fixture(scope="session")
def full_runtime() -> None:
    """The full sandbox image and its unpacked runtime, built before the test (cached: 2-6 s), or
    waited for while setup's background job builds them under the same lock."""
    if os.geteuid() == 0:
        done = subprocess.run([str(HACK / "setup.sh"), "--runtime"], capture_output=True, text=True)
        assert done.returncode == 0, f"hack/setup.sh --runtime failed:\n{done.stderr[-4000:]}"


@pytest.fixture(scope="session")
def minio_binary() -> Path:
    """MinIO's binary, built if missing (cached, under a lock): a test starting MinIO asks for it, so the
    scheduler knows it waits on that build."""
    return ensure_minio_binary()


@pytest.fixture(scope="session")
def s3(minio_binary):
    """A MinIO server on 127.0.0.1 for this session (one per xdist worker)."""
    server = MinioServer(host="127.0.0.1").start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3, monkeypatch):
    """Point os.environ's AWS variables at the session MinIO for one test."""
    for name in _AWS_VARS_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.env()


class ClusterUsers:
    """A shared lock held by every session using the cluster, so that a teardown test (which
    takes it exclusively) never stops the cluster under another worker or another session."""

    def __init__(self) -> None:
        path = cache_dir() / "locks" / "cluster-users.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def acquire_shared(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def acquire_exclusive(self, timeout: float) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(1)

    def close(self) -> None:
        os.close(self._fd)


@pytest.fixture(scope="session")
def cluster_users():
    users = ClusterUsers()
    yield users
    users.close()


@pytest.fixture(scope="session")
def cluster(cluster_users):
    """The local cluster, up and with the project images imported (reused when already up).

    Attributes: kubeconfig, node_name, node_ip, kubectl_path, images (name -> ref);
    helpers: kubectl(*args), kubectl_json(*args), apply(manifest), env()."""
    return local_cluster.bring_up()


@pytest.fixture(scope="session")
def cluster_s3(cluster, minio_binary):
    """A MinIO server on the node address, reachable from pods; same API as `s3`."""
    server = MinioServer(host=cluster.node_ip).start()
    yield server
    server.stop()

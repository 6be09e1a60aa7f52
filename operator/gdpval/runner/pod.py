"""The in-pod steps: stage a sample's references, and run one attempt against the sidecar sandbox.

The agent's modules (openai above all) are imported inside `run_sample`: the stage init container
starts a fresh interpreter on every sample pod and must not pay for a client it never uses.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from gdpval import contract
from gdpval.errors import GdpvalError
from gdpval.records import load_entry, load_record
from gdpval.runner.claim import read_signal
from gdpval.storage import Storage

if TYPE_CHECKING:
    from gdpval.manifest import ManifestEntry
    from gdpval.sample import SampleResult

SANDBOX_READY_TIMEOUT_S = 180.0
GO_POLL_S = 0.02  # a pod started ahead reads its go file this often: a stat and a small read
# openai imports its aiohttp transport whenever aiohttp is installed (the operator's kopf brings it into
# the image); the agent's client is synchronous, and that import was a tenth of the agent's start.
OPTIONAL_UNUSED = ("aiohttp",)
STAGE_CONCURRENCY = 8  # downloads in flight per pod: enough to hide round trips, few enough for a small node


class ModelUnavailable(Exception):
    """The model endpoint's outage ended the attempt and nothing was committed: the pod exits with
    EXIT_MODEL_UNAVAILABLE and the operator runs the same attempt again (here, not in `runner.attempt`,
    so the command's handler imports nothing of the agent's)."""


def stage(storage: Storage, run: str, sample_id: str, dest: Path) -> list[Path]:
    """Copy the sample's mirrored references to `dest/<hash>/<name>` and make them read-only (stage_entry)."""
    return stage_entry(storage, load_entry(storage, run, sample_id), dest)


def stage_entry(storage: Storage, entry: ManifestEntry, dest: Path) -> list[Path]:
    """`entry`'s references staged, several at once: a task can have a dozen files, and each is a round trip the
    agent's start waits on."""
    wanted: dict[Path, str] = {}
    for ref in entry.references:
        if not ref.key:
            continue  # missing from the dataset: the agent records the sample as failed
        target = dest / ref.path.removeprefix("reference_files/")
        if not target.resolve().is_relative_to(dest.resolve()):
            raise GdpvalError(f"reference path {ref.path!r} escapes the staging folder")
        wanted[target] = ref.key
    with ThreadPoolExecutor(max_workers=STAGE_CONCURRENCY) as pool:
        return list(pool.map(lambda target: _fetch(storage, wanted[target], target), wanted))


def _fetch(storage: Storage, key: str, target: Path) -> Path:
    storage.get_file(key, target)
    target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return target


def run_sample(
    storage: Storage, run: str, sample_id: str, attempt_number: int, sandbox: str, go: Path | None = None, entry: ManifestEntry | None = None
) -> SampleResult:
    """One attempt in a pod; a restarted container finds its own commit and does nothing twice. A pod started
    ahead of its turn (`go`) gets everything ready, then waits for the go before its first model request. `entry`:
    the sample's, when the caller read it already (a pool pod's agent, which staged its references)."""
    with _unimportable(OPTIONAL_UNUSED):
        from gdpval.agent.client import connection_pool, governed, make_client, reach, rehearse
        from gdpval.agent.governor import Governor, Meter
        from gdpval.runner.attempt import Attempt, AttemptRedo, SandboxView, commit, missing_references, run_attempt
    from gdpval.sample import SampleResult
    from gdpval.sandbox.client import SandboxClient

    attempt = Attempt(load_record(storage, run), entry or load_entry(storage, run, sample_id), attempt_number)
    done = attempt.keys.result
    if storage.exists(done):
        return SampleResult.model_validate_json(storage.get_text(done))
    failure, warnings = missing_references(attempt, [ref.path for ref in attempt.entry.references if not ref.key])
    if failure is not None:
        return commit(attempt, storage, failure, None, None)
    tools = SandboxClient(sandbox, os.environ.get(contract.TOKEN_ENV, ""))
    tools.wait_ready(SANDBOX_READY_TIMEOUT_S)
    refs = [f"{contract.REFERENCES}/{ref.path.removeprefix('reference_files/')}" for ref in attempt.entry.references if ref.key]
    view = SandboxView(contract.WORKSPACE, contract.REFERENCES, refs)
    settings = attempt.record.settings
    client = make_client(settings.model.base_url)
    # The pod sees only its own spend: the run's limits are the controller's to keep, the sample's are here.
    # An outage is waited out for a while (the sample keeps its conversation), then the pod ends with
    # EXIT_MODEL_UNAVAILABLE (AttemptRedo) so the operator holds the attempt without a pod.
    hold = float(os.environ.get(contract.OUTAGE_HOLD_ENV) or contract.OUTAGE_HOLD_SECONDS)
    governor = Governor(1, settings.budget.model_copy(update={"run_tokens": None, "run_cost": None}), hold_s=hold)
    meter = Meter()
    with tempfile.TemporaryDirectory(prefix="gdpval-agent-") as scratch:
        sample_client = governed(client, connection_pool(client, 1), governor, meter)
        if go is not None:
            rehearse(client)
            if settings.model.base_url:
                _say_reached(reach(settings.model.base_url))
            wait_for_go(go, Path(contract.READY_FILE))
        try:
            return run_attempt(
                attempt,
                storage,
                sample_client,
                tools,
                view,
                Path(contract.WORKSPACE),
                Path(scratch),
                warnings=warnings,
                meter=meter,
                redo=lambda result: governor.ended_by_outage(result.error_kind, 0),
            )
        except AttemptRedo:
            raise ModelUnavailable(sample_id) from None


def run_pooled(folder: Path, sandbox: str) -> SampleResult:
    """A pool pod's agent: everything a sample needs before it is known (imports, a rehearsed request, the S3
    client's models, a healthy sandbox), then the claim (runner.claim), the sample's references staged here (no
    init container runs after a claim), and the attempt as `run_sample` runs it."""
    from gdpval.runner.claim import take_on, wait_for_claim
    from gdpval.sandbox.client import SandboxClient
    from gdpval.storage import open_storage
    from gdpval.storage.s3 import s3_client

    with _unimportable(OPTIONAL_UNUSED):
        import gdpval.runner.attempt  # noqa: F401
        from gdpval.agent.client import make_client, rehearse
    rehearse(make_client(None))  # openai's chat resources and request types, built before any endpoint is known
    s3_client("http://127.0.0.1:9")  # loads botocore's S3 models into the session: the claimed client starts warm
    SandboxClient(sandbox, os.environ.get(contract.TOKEN_ENV, "")).wait_ready(SANDBOX_READY_TIMEOUT_S)
    claim = wait_for_claim(folder, Path(contract.READY_FILE))
    take_on(claim, folder)
    storage = open_storage(claim.output)
    entry = load_entry(storage, claim.run, claim.sample)
    stage_entry(storage, entry, Path(contract.REFERENCES))
    go = folder / Path(contract.CLAIM_GO_FILE).name if claim.ahead else None
    return run_sample(storage, claim.run, claim.sample, claim.attempt, sandbox, go, entry)


def _say_reached(seconds: float | None) -> None:
    """A slow or failed first connection is worth a line in the pod's log: it is where a start's seconds go."""
    if seconds is None or seconds > 1:
        took = "no answer" if seconds is None else f"reached in {seconds:.1f} s"
        print(f"gdpval: the model endpoint: {took}, before the go", file=sys.stderr, flush=True)


def wait_for_go(go: Path, ready: Path, poll: float = GO_POLL_S) -> None:
    """Say the agent waits ready (`ready`, which the agent's startup probe looks for), then wait until the operator's
    go shows in the downward-API file (the kubelet rewrites it within about 0.1 s of the annotation's change);
    anything but empty or the go is refused: only the operator writes it."""
    ready.touch()
    while True:
        text = read_signal(go)
        if text == contract.GO_VALUE:
            return
        if text:
            raise GdpvalError(f"unexpected go signal {text[:100]!r} in {go}")
        time.sleep(poll)


class _Refuse(MetaPathFinder):
    """An import finder that refuses some top-level packages (modules already imported are not asked for)."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] in self.names:
            raise ImportError(f"{fullname} is not used by a sample pod's agent", name=fullname)
        return None


@contextmanager
def _unimportable(names: tuple[str, ...]) -> Iterator[None]:
    """Imports inside see `names` as not installed; imports after see them again."""
    finder = _Refuse(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)

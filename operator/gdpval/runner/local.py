"""`gdpval run`: samples run concurrently in local sandboxes, committed to storage as they finish.

Resuming is reading storage: a sample with a committed result is skipped, anything else runs again
under a fresh attempt number. Killing the process at any point loses only unfinished attempts.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path

import openai

from gdpval.agent.client import connection_pool, governed
from gdpval.agent.governor import Governor, Meter
from gdpval.dataset.loader import LoadedDataset, MissingReference
from gdpval.errors import GdpvalError
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.records import committed_results, run_spend
from gdpval.runner.attempt import (
    Attempt,
    AttemptCancelled,
    AttemptRedo,
    SandboxView,
    commit,
    cut_conversation,
    failed_result,
    missing_references,
    restore_workspace,
    run_attempt,
)
from gdpval.sample import ErrorKind, SampleResult, SampleStatus
from gdpval.sandbox.client import SandboxClient
from gdpval.sandbox.launch import bwrap_status, network_status
from gdpval.sandbox.limits import Limits
from gdpval.sandbox.limits.report import check as check_limits
from gdpval.sandbox.local import Isolation, LocalSandbox
from gdpval.sandbox.runtime import Runtime, comparability_warning, resolve
from gdpval.storage import Storage
from gdpval.storage.progress import progress_from_keys

log = logging.getLogger(__name__)


@dataclass
class LocalOptions:
    concurrency: int = 4
    isolation: Isolation = "auto"
    retry_failed: bool = False
    workdir: Path | None = None
    runtime: Runtime = field(default_factory=Runtime)


def choose_runtime(record: RunRecord, isolation: Isolation) -> tuple[RunRecord, Runtime]:
    """The runtime the run's sandboxes use, and the record naming it (written if the run is new).

    Without bubblewrap there is no root to swap: `auto` falls back to the host, anything else is refused.
    """
    isolated = isolation != "none" and bwrap_status()[0]
    choice = record.settings.sandbox.runtime
    if not isolated and choice not in ("auto", "host"):
        raise GdpvalError(f"--sandbox-runtime {choice} needs bubblewrap isolation, which is off ({bwrap_status()[1]}; --isolation {isolation})")
    if isolated and record.settings.sandbox.network and not network_status()[0]:
        raise GdpvalError(f"--network gives each sandbox a network namespace of its own, which does not work here: {network_status()[1]}")
    system = resolve(choice) if isolated else Runtime()
    return record.model_copy(update={"runtime": system.label}), system


def runtime_notes(stored: RunRecord, system: Runtime, scripted: str) -> list[str]:
    """What `gdpval run` says at start about its runtime (`scripted`: the scripted model's name, which
    needs no warning); a resumed run refuses another root than its own."""
    if stored.runtime is not None and stored.runtime != system.label:
        raise GdpvalError(
            f"run {stored.run_name!r} ran its samples in runtime {stored.runtime}, not {system.label}: resume it with "
            "--sandbox-runtime naming that one (host, or the folder `gdpval runtime show` lists), or start a new --run-name"
        )
    notes = [f"sandbox runtime: {system.describe()}"]
    warning = comparability_warning(system, stored.settings.model.name, scripted)
    return notes + ([warning] if warning else [])


def pending(entries: list[ManifestEntry], keys: list[str], retry_failed: bool, storage: Storage, run: str) -> list[tuple[ManifestEntry, int]]:
    """(entry, attempt number) for every sample still to run: never committed, cut short by the run's
    budget (it goes on once the limit allows), or failed with `retry_failed`."""
    progress = progress_from_keys(keys)
    last = committed_results(storage, run, {sample: state.last_committed for sample, state in progress.items() if state.last_committed is not None})
    todo = []
    for entry in entries:
        sample = entry.sample.sample_id
        state = progress.get(sample)
        result = last.get(sample, {}).get(state.last_committed) if state and state.last_committed is not None else None
        if result is not None and result.error_kind != ErrorKind.budget:
            if not retry_failed or result.status == SampleStatus.succeeded:
                continue
        todo.append((entry, state.next_attempt if state else 1))
    return todo


class LocalRunner:
    def __init__(
        self,
        storage: Storage,
        record: RunRecord,
        dataset: LoadedDataset,
        client: openai.OpenAI,
        options: LocalOptions,
        on_event: Callable[[str, ManifestEntry, SampleResult | None], None] = lambda *a: None,
    ):
        self.storage = storage
        self.record = record
        self.dataset = dataset
        self.client = client
        self.options = options
        self.on_event = on_event
        self.stopping = threading.Event()
        self.active: set[LocalSandbox] = set()
        self.limits = Limits.of(record.settings.sandbox)
        if options.isolation != "none":
            for line in check_limits(self.limits):
                print(line, file=sys.stderr, flush=True)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"gdpval-{record.run_name}-", dir=options.workdir))
        settings = record.settings
        spent = run_spend(storage, record.run_name, settings.budget.prices)
        self.governor = Governor(options.concurrency, settings.budget, spent, notice=_tell)
        self.pool = connection_pool(client, options.concurrency)
        self.not_started: list[str] = []  # samples the run budget kept from starting
        self.budget_cut = 0  # samples the run budget ended (reason budget)

    def run(self, todo: list[tuple[ManifestEntry, int]]) -> list[SampleResult]:
        """Run every pending sample; on Ctrl-C stop the sandboxes and leave unfinished work uncommitted."""
        pool = ThreadPoolExecutor(max_workers=self.options.concurrency, thread_name_prefix="sample")
        try:
            futures = [pool.submit(self._one, entry, number) for entry, number in todo]
            results = [r for f in futures if (r := _result(f)) is not None]
            pool.shutdown()
            self._tell_budget(results)
            return results
        except BaseException:
            self.stopping.set()
            pool.shutdown(wait=False, cancel_futures=True)
            for box in list(self.active):
                try:
                    box.stop()
                except Exception:  # the interrupt, not a cleanup error, is what the caller must see
                    log.exception("could not stop a sandbox")
            raise
        finally:
            self.pool.close()
            shutil.rmtree(self.workdir, ignore_errors=True)

    def budget_stopped(self) -> bool:
        """The run budget cut samples or kept them from starting: they wait for a higher limit."""
        return bool(self.budget_cut or self.not_started)

    def _tell_budget(self, results: list[SampleResult]) -> None:
        """The closing line of a run its budget stopped: what was spent, what is left to do."""
        self.budget_cut = sum(1 for r in results if r.error_kind == ErrorKind.budget)
        cut = self.budget_cut
        if self.governor.exhausted() is None or not (cut or self.not_started):
            return
        spent = self.governor.total().describe(self.record.settings.budget.prices)
        _tell(
            f"run budget: {spent} spent; {cut} sample(s) ended with reason budget and {len(self.not_started)} did not start: "
            "run the same command with a higher limit to go on"
        )

    def _one(self, entry: ManifestEntry, number: int) -> SampleResult | None:
        while True:
            self.governor.wait_available(self.stopping.is_set)
            if self.stopping.is_set():
                return None
            if self.governor.exhausted():
                self.not_started.append(entry.sample.sample_id)
                return None
            attempt = Attempt(self.record, entry, number)
            self.on_event("start", entry, None)
            try:
                result = self._attempt(attempt)
            except AttemptRedo:  # the outage's doing: the same attempt again once the endpoint answers
                self.on_event("redo", entry, None)
                continue
            except AttemptCancelled:
                return None
            except Exception as exc:  # an infrastructure fault: leave it uncommitted so a re-run redoes it
                log.exception("sample %s attempt %d crashed", entry.sample.sample_id, number)
                self.on_event("crash", entry, failed_result(attempt, ErrorKind.internal, str(exc)))
                return None
            self.on_event("done", entry, result)
            return result

    def _attempt(self, attempt: Attempt) -> SampleResult:
        references, missing = self._fetch_references(attempt)
        failure, warnings = missing_references(attempt, missing)
        if failure is not None:
            return commit(attempt, self.storage, failure, None, None)
        cut = cut_conversation(self.storage, self.record.run_name, attempt.sample_id) if attempt.number > 1 else None
        base = self.workdir / attempt.sample_id / f"attempt-{attempt.number}"
        workspace, scratch = base / "workspace", base / "scratch"
        workspace.mkdir(parents=True)
        scratch.mkdir()
        try:
            network = self.record.settings.sandbox.network
            options = self.options
            meter, openings = Meter(), self.governor.openings()
            with LocalSandbox(workspace, references, network=network, isolation=options.isolation, limits=self.limits, system=options.runtime) as box:
                self.active.add(box)
                try:
                    view = SandboxView(box.workspace_path, box.reference_root, [box.reference_path(p) for p in references])
                    tools = SandboxClient(box.address, box.token)
                    resumed = restore_workspace(self.storage, self.record.run_name, attempt.sample_id, cut, tools) if cut else None
                    return run_attempt(
                        attempt,
                        self.storage,
                        governed(self.client, self.pool, self.governor, meter),
                        tools,
                        view,
                        box.host_workspace,
                        scratch,
                        cancelled=self.stopping.is_set,
                        warnings=warnings,
                        meter=meter,
                        redo=lambda result: self.governor.ended_by_outage(result.error_kind, openings),
                        resumed=resumed,
                    )
                finally:
                    self.active.discard(box)
        finally:
            shutil.rmtree(base, ignore_errors=True)

    def _fetch_references(self, attempt: Attempt) -> tuple[dict[str, Path], list[str]]:
        """Local paths of the sample's reference files, and the dataset paths that could not be fetched."""
        found, missing = {}, []
        for ref in attempt.entry.references:
            try:
                found[ref.path] = self.dataset.fetch_reference(ref.path)
            except MissingReference:
                missing.append(ref.path)
        return found, missing


def _tell(line: str) -> None:
    """A line for the person running the run (a live progress display keeps it above itself)."""
    print(line, file=sys.stderr, flush=True)


def _result(future: Future) -> SampleResult | None:
    """The future's result, waited for in short steps: a process-directed SIGINT may be delivered to a
    worker thread, and a main thread blocked in one untimed wait would then never run Python's handler
    (seen in CI: Ctrl-C left the runner waiting for ever)."""
    while True:
        try:
            return future.result(timeout=0.2)
        except FutureTimeout:
            continue

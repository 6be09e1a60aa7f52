"""A run's records in storage: run.json and the manifest, read and written here and nowhere else.

A run exists once its run.json does: `save_run` writes each sample's entry and the manifest first and
run.json last, so a reader that finds run.json finds the rest. Every reader goes through `load_run`
(or `find_record`, for a run that may be new), so "never prepared" and "unreadable" read the same
whichever command meets them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from pydantic import ValidationError

from gdpval.budget import Spend
from gdpval.errors import GdpvalError
from gdpval.manifest import ManifestEntry, RunRecord, dump_manifest, load_manifest
from gdpval.sample import SampleResult
from gdpval.settings import PriceSettings
from gdpval.storage import NotFound, Storage, layout
from gdpval.storage.progress import progress_from_keys

READERS = 16  # result.json files read at once (round trips on S3)


class RunNotPrepared(GdpvalError):
    """No run.json (or no manifest) under that run name in that storage."""

    def __init__(self, storage: Storage, run: str):
        super().__init__(f"run {run!r} was never prepared in {storage.uri}: check --output and --run-name")


class UnreadableRun(GdpvalError):
    """A run.json or manifest this version cannot read (another version's, or damaged)."""


def record_url(storage: Storage, run: str) -> str:
    """Where the run's run.json is, as error messages name it."""
    return storage.url(layout.run_json(run))


def is_prepared(storage: Storage, run: str) -> bool:
    return storage.exists(layout.run_json(run)) and storage.exists(layout.manifest(run))


def find_record(storage: Storage, run: str) -> RunRecord | None:
    """The run's stored record, None for a new run; an unreadable one is refused with what to do."""
    try:
        text = storage.get_text(layout.run_json(run))
    except NotFound:
        return None
    try:
        return RunRecord.model_validate_json(text)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise UnreadableRun(
            f"{record_url(storage, run)} is not a run record this version reads ({where}: {problem['msg']}): "
            "choose a new --run-name, or resume it with the gdpval version that wrote it"
        ) from None


def load_record(storage: Storage, run: str) -> RunRecord:
    """The run's record; RunNotPrepared when there is none."""
    record = find_record(storage, run)
    if record is None:
        raise RunNotPrepared(storage, run)
    return record


def load_entries(storage: Storage, run: str) -> list[ManifestEntry]:
    """The run's manifest: one entry per sample, in order."""
    try:
        text = storage.get_text(layout.manifest(run))
    except NotFound:
        raise RunNotPrepared(storage, run) from None
    try:
        return load_manifest(text)
    except ValidationError as exc:
        raise UnreadableRun(f"run {run!r} in {storage.uri} has an unreadable manifest: {exc.errors()[0]['msg']}") from None


def load_entry(storage: Storage, run: str, sample_id: str) -> ManifestEntry:
    """The sample's own entry object; the whole manifest only for runs prepared before entries existed."""
    try:
        return ManifestEntry.model_validate_json(storage.get_text(layout.entry(run, sample_id)))
    except NotFound:
        pass
    for entry in load_entries(storage, run):
        if entry.sample.sample_id == sample_id:
            return entry
    raise GdpvalError(f"sample {sample_id!r} is not in the run's manifest")


def load_run(storage: Storage, run: str) -> tuple[RunRecord, list[ManifestEntry]]:
    """The run's record and manifest, or RunNotPrepared / UnreadableRun saying what to check."""
    return load_record(storage, run), load_entries(storage, run)


def save_run(storage: Storage, record: RunRecord, entries: list[ManifestEntry]) -> None:
    """Each sample's entry, the manifest, then run.json: the run exists once run.json does."""
    run = record.run_name
    for entry in entries:
        storage.put_text(layout.entry(run, entry.sample.sample_id), entry.model_dump_json())
    storage.put_text(layout.manifest(run), dump_manifest(entries))
    storage.put_text(layout.run_json(run), record.dump())


def committed_results(storage: Storage, run: str, attempts: dict[str, int | set[int]]) -> dict[str, dict[int, SampleResult]]:
    """The committed result.json of the given attempts (a number or a set per sample), read concurrently."""
    wanted = [(sample, n) for sample, numbers in attempts.items() for n in ({numbers} if isinstance(numbers, int) else numbers)]

    def read(item: tuple[str, int]) -> SampleResult:
        return SampleResult.model_validate_json(storage.get_text(layout.result(run, *item)))

    out: dict[str, dict[int, SampleResult]] = {}
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        for (sample, n), result in zip(wanted, pool.map(read, wanted), strict=True):
            out.setdefault(sample, {})[n] = result
    return out


def run_spend(storage: Storage, run: str, prices: PriceSettings) -> Spend:
    """What every committed attempt of the run spent (an attempt cut by a crash was never recorded); an
    attempt the run budget cut is counted in the one that went on from it, which carries its spend."""
    progress = progress_from_keys(storage.list(layout.samples(run)))
    spent = Spend()
    for results in committed_results(storage, run, {s: p.committed for s, p in progress.items() if p.committed}).values():
        continued = {r.continues for r in results.values()}
        for number, result in results.items():
            if number not in continued:
                spent.add(result.usage, prices, result.cost)
    return spent

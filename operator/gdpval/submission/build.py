"""Assemble the submission package(s) and results.parquet from committed results in storage.

Only the Storage interface is used, so a local folder and S3 build the same objects. A sample's
committed result is the attempt gdpval.storage.committed chooses. Re-running rebuilds everything in
place: every object is rewritten whole, and files a previous build left behind are removed.
"""

from __future__ import annotations

import io
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field, ValidationError

from gdpval.errors import GdpvalError
from gdpval.manifest import ManifestEntry, RunRecord
from gdpval.records import load_run
from gdpval.sample import SampleCounts, SampleResult
from gdpval.storage import Storage, layout
from gdpval.storage.committed import CommittedAttempt, list_committed
from gdpval.submission.readiness import GRADING_READY_DEFINITION, GRADING_TEXT_ONLY, CheckResults, current_share, load_check
from gdpval.submission.schema import (
    UnsafeDeliverable,
    deliverable_path,
    ready,
    result_row,
    results_table,
    submission_row,
    submission_table,
)

READY_DEFINITION = (
    "submission_ready = the share of this package's samples whose committed attempt left a non-empty final "
    "text or at least one deliverable file, however the attempt ended (the benchmark's definition); "
    "completed = the share that ended with a final answer (status 'succeeded'). Missing samples are "
    "neither. Neither figure measures quality."
)
OFFICIAL_SCORE = "The official GDPval score comes from OpenAI's grader, which grades this package; this tool does not score deliverables."


class SubmissionError(GdpvalError):
    """The run cannot be assembled (unreadable results)."""


class PackageCounts(SampleCounts):
    """A package's samples: `missing` have no committed attempt; `ready` are submission-ready."""

    missing: int = 0
    ready: int = 0


BEST_OF_N_LABEL = (
    "best-of-N: for each task, the one repeat a local pairwise judge preferred among the run's N repeats (win over tie over loss); "
    "a scaffolding gain as the GDPval paper reports best-of-N, not a single-attempt result. The per-repeat packages are the run's own."
)


class BestOfN(BaseModel):
    """How a best-of-N package was chosen: per task, the repeat the pairwise judge liked best."""

    label: str = BEST_OF_N_LABEL
    n: int
    judge_model: str
    against: str
    chosen: dict[str, int]  # task id -> the repeat in the package
    judge_reliability: str = ""  # the pairwise estimate's label ("position-biased: estimate unreliable") when its orders disagreed too often


class PackageInfo(BaseModel):
    """The content of one package's submission_info.json."""

    run_name: str
    dataset: str
    dataset_source: str
    dataset_revision: str
    split: str
    repeat: int | None  # None: a best-of-N package (see best_of_n)
    repeats: int
    tasks: int
    counts: PackageCounts
    submission_ready: float
    completed: float
    grading_ready: float | None = None  # None: `gdpval check` has not checked these committed attempts
    grading_text_only: bool | None = None  # that check had no LibreOffice (see GRADING_TEXT_ONLY); None: not checked
    submission_ready_definition: str = READY_DEFINITION
    grading_ready_definition: str = GRADING_READY_DEFINITION
    official_score: str = OFFICIAL_SCORE
    created_at: str
    runtime: str | None = None  # local runs: "host" or the sandbox image digest (see RunRecord.runtime)
    warnings: list[str] = Field(default_factory=list)
    best_of_n: BestOfN | None = None


class SubmissionInfo(BaseModel):
    """What a build wrote: one package per repeat, plus the results table."""

    run_name: str
    uri: str
    results_uri: str
    counts: PackageCounts
    submission_ready: float
    completed: float
    packages: list[PackageInfo]
    grading_ready: float | None = None
    warnings: list[str] = Field(default_factory=list)


def build_submission(storage: Storage, run: str) -> SubmissionInfo:
    """Write every package, results.parquet, and remove what a previous build left behind."""
    record, entries = load_run(storage, run)
    attempts = list_committed(storage, run)
    results, warnings = _load_results(storage, run, entries, attempts)
    repeats = max([record.settings.selection.repeats, *(e.sample.repeat + 1 for e in entries)])
    check = load_check(storage, run)
    builder = _Builder(storage, record, results, attempts, datetime.now(UTC).isoformat(timespec="seconds"), check)
    packages = [builder.package([e for e in entries if e.sample.repeat == k], k, repeats) for k in range(repeats)]
    _remove_stale(storage, layout.submission(run), builder.written)
    rows = [result_row(e, results.get(e.sample.sample_id)) for e in entries]
    storage.put_bytes(layout.results_parquet(run), _parquet(results_table(rows)))
    counts = _counts(entries, results)
    return SubmissionInfo(
        run_name=run,
        uri=storage.url(layout.submission(run)),
        results_uri=storage.url(layout.results_parquet(run)),
        counts=counts,
        submission_ready=_share(counts.ready, counts),
        completed=_share(counts.succeeded, counts),
        grading_ready=current_share(check, _committed(entries, attempts)),
        packages=packages,
        warnings=list(dict.fromkeys(warnings + [w for p in packages for w in p.warnings])),
    )


def best_choice(entries: list[ManifestEntry], best: dict[str, str]) -> tuple[list[ManifestEntry], list[str]]:
    """One entry per task: the sample the judge chose (task id -> sample id), else the first repeat; and the tasks without a choice."""
    picked, unjudged = [], []
    for task_id in dict.fromkeys(e.sample.task_id for e in entries):
        repeats = sorted((e for e in entries if e.sample.task_id == task_id), key=lambda e: e.sample.repeat)
        chosen = [e for e in repeats if e.sample.sample_id == best.get(task_id)]
        picked.append(chosen[0] if chosen else repeats[0])
        if not chosen:
            unjudged.append(task_id)
    return picked, unjudged


def build_best_of_n(storage: Storage, run: str, best: dict[str, str], judge_model: str, against: str, reliability: str = "") -> PackageInfo:
    """Write the best-of-N package in its own folder: per task, the sample the judge chose (task id -> sample id)."""
    record, entries = load_run(storage, run)
    picked, unjudged = best_choice(entries, best)
    n = max([record.settings.selection.repeats, *(e.sample.repeat + 1 for e in entries)])
    chosen = {e.sample.task_id: e.sample.repeat for e in picked}
    how = BestOfN(n=n, judge_model=judge_model, against=against, chosen=chosen, judge_reliability=reliability)
    attempts = list_committed(storage, run)
    results, warnings = _load_results(storage, run, picked, attempts)
    warnings += [f"{task}: no repeat was judged; its first repeat stands in" for task in unjudged]
    builder = _Builder(storage, record, results, attempts, datetime.now(UTC).isoformat(timespec="seconds"), load_check(storage, run))
    info = builder.package(picked, None, n, how, warnings)
    _remove_stale(storage, layout.best_of_n_package(run), builder.written)
    return info


def _committed(entries: list[ManifestEntry], attempts: dict[str, CommittedAttempt]) -> dict[str, int | None]:
    return {e.sample.sample_id: a.attempt if (a := attempts.get(e.sample.sample_id)) else None for e in entries}


def _load_results(storage: Storage, run: str, entries: list[ManifestEntry], attempts: dict[str, CommittedAttempt]) -> tuple[dict[str, SampleResult], list[str]]:
    """Each sample's committed result, limited to the deliverables really present in storage."""
    results: dict[str, SampleResult] = {}
    warnings: list[str] = []
    for entry in entries:
        sample = entry.sample.sample_id
        if sample not in attempts:
            continue
        chosen = attempts[sample]
        key = layout.result(run, sample, chosen.attempt)
        try:
            result = SampleResult.model_validate_json(storage.get_text(key))
        except ValidationError as exc:
            raise SubmissionError(f"{storage.url(key)} is not a valid result: {exc.errors()[0]['msg']}") from None
        if result.sample_id != sample:
            raise SubmissionError(f"{storage.url(key)} belongs to sample {result.sample_id!r}, not {sample!r}")
        absent = [rel for rel in result.deliverable_files if rel not in chosen.present]
        warnings += [f"{sample}: deliverable {rel!r} is listed but absent from storage; left out" for rel in absent]
        kept = [rel for rel in result.deliverable_files if rel in chosen.present]
        results[sample] = result.model_copy(update={"deliverable_files": kept})
    return results, warnings


class _Builder:
    """Writes packages of one run and remembers every key it wrote (to find stale ones)."""

    def __init__(
        self,
        storage: Storage,
        record: RunRecord,
        results: dict[str, SampleResult],
        attempts: dict[str, CommittedAttempt],
        created: str,
        check: CheckResults | None,
    ):
        self.storage = storage
        self.record = record
        self.results = results
        self.attempts = attempts
        self.created = created
        self.check = check
        self.written: set[str] = set()

    def package(
        self, entries: list[ManifestEntry], repeat: int | None, repeats: int, best_of_n: BestOfN | None = None, warnings: list[str] | None = None
    ) -> PackageInfo:
        """Copy deliverables, then the parquet, then submission_info.json (last, as the marker)."""
        run = self.record.run_name
        prefix = layout.package(run, repeat, repeats) if repeat is not None else layout.best_of_n_package(run)
        warnings = list(warnings or [])
        rows = []
        for entry in entries:
            result = self._copy(entry, self.results.get(entry.sample.sample_id), prefix, warnings)
            rows.append(submission_row(entry, result))
        self._put(layout.package_parquet(prefix), _parquet(submission_table(rows)))
        counts = _counts(entries, self.results)
        dataset = self.record.dataset
        grading_ready = current_share(self.check, _committed(entries, self.attempts))
        info = PackageInfo(
            run_name=self.record.run_name,
            dataset=dataset.location,
            dataset_source=dataset.source,
            dataset_revision=dataset.revision,
            split=self.record.settings.dataset.split,
            repeat=repeat,
            repeats=repeats,
            tasks=len({e.sample.task_id for e in entries}),
            counts=counts,
            submission_ready=_share(counts.ready, counts),
            completed=_share(counts.succeeded, counts),
            grading_ready=grading_ready,
            grading_text_only=self.check.text_only if grading_ready is not None and self.check is not None else None,
            created_at=self.created,
            runtime=self.record.runtime,
            warnings=warnings,
            best_of_n=best_of_n,
        )
        if info.grading_text_only:
            info.warnings.append(GRADING_TEXT_ONLY)
        self._put(layout.package_info(prefix), (info.model_dump_json(indent=2) + "\n").encode())
        return info

    def _copy(self, entry: ManifestEntry, result: SampleResult | None, prefix: str, warnings: list[str]) -> SampleResult | None:
        """Copy a submission-ready sample's files into the package; unsafe names are left out and reported."""
        if result is None or not result.ready:
            return result
        sample = entry.sample.sample_id
        source = layout.deliverables(self.record.run_name, sample, self.attempts[sample].attempt)
        kept = []
        with tempfile.TemporaryDirectory(prefix="gdpval-submission-") as tmp:
            for rel in result.deliverable_files:
                try:
                    dest = f"{prefix}/{deliverable_path(entry.task.task_id, rel)}"
                except UnsafeDeliverable as exc:
                    warnings.append(f"{sample}: {exc}; left out")
                    continue
                self.storage.get_file(f"{source}/{rel}", Path(tmp) / "file")
                self.storage.put_file(dest, Path(tmp) / "file")
                self.written.add(dest)
                kept.append(rel)
        return result.model_copy(update={"deliverable_files": kept})

    def _put(self, key: str, data: bytes) -> None:
        self.storage.put_bytes(key, data)
        self.written.add(key)


def _counts(entries: list[ManifestEntry], results: dict[str, SampleResult]) -> PackageCounts:
    outcomes = [results.get(e.sample.sample_id) for e in entries]
    return PackageCounts(
        total=len(entries),
        succeeded=sum(1 for r in outcomes if r is not None and r.completed),
        failed=sum(1 for r in outcomes if r is not None and not r.completed),
        missing=sum(1 for r in outcomes if r is None),
        ready=sum(1 for r in outcomes if ready(r)),
    )


def _share(part: int, counts: PackageCounts) -> float:
    return round(part / counts.total, 4) if counts.total else 0.0


def _parquet(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _remove_stale(storage: Storage, root: str, written: set[str]) -> None:
    """Delete objects under `root` this build did not write, so a rebuild never mixes two builds."""
    for key in storage.list(root):
        if key not in written:
            storage.delete(key)

"""What the operator reads from S3 (blocking calls; the caller runs them in a thread).

The operator never writes run artifacts: it reads the manifest after prepare, commit markers when
a pod ends, and submission_info.json after assembly. It writes only its own ledger's archive
segments (the entries of ended attempts, see `ledger`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import ValidationError

from gdpval.api.v1alpha1 import JudgeEstimate, OutputSpec
from gdpval.controller.pure.judging import pairwise_estimate
from gdpval.controller.pure.ledger import Ledger, ResultSummary, decode_segment, encode_segment, rebuild
from gdpval.controller.types import Probe, Submission
from gdpval.judge import LABEL, load_results
from gdpval.judge.store import GOLD, load_pair_results
from gdpval.judge.verdicts import PAIRWISE_LABEL
from gdpval.records import load_run
from gdpval.sample import SampleResult
from gdpval.settings import DEFAULT_JUDGE_METHOD, JudgeMethod
from gdpval.storage import NotFound, Storage, layout, open_storage
from gdpval.storage.progress import progress_from_keys
from gdpval.storage.s3 import S3Storage


def open_output(output: OutputSpec, credentials: Mapping[str, str] | None) -> S3Storage:
    """Storage for a run's output with the run's own credentials (not the operator's ambient ones)."""
    storage = open_storage(output, credentials)
    assert isinstance(storage, S3Storage)  # the CRD admits only s3:// outputs
    return storage


def load_samples(storage: Storage, run: str) -> tuple[tuple[str, ...], dict[str, str], str]:
    """Sample ids in manifest order, each sample's sector, and the pinned dataset revision."""
    record, entries = load_run(storage, run)
    return tuple(e.sample.sample_id for e in entries), {e.sample.sample_id: e.task.sector for e in entries}, record.dataset.revision


def read_committed(storage: Storage, run: str, sample: str, attempt: int) -> ResultSummary | None:
    try:
        text = storage.get_text(layout.result(run, sample, attempt))
    except NotFound:
        return None
    return ResultSummary.of(SampleResult.model_validate_json(text))


def probe(storage: Storage, run: str, sample: str, attempt: int, pod_exists: bool) -> Probe:
    committed = read_committed(storage, run, sample, attempt)
    has_files = committed is not None or next(iter(storage.list(layout.attempt_root(run, sample, attempt))), None) is not None
    return Probe(committed=committed, has_files=has_files, pod_exists=pod_exists)


def rebuild_ledger(storage: Storage, run: str, now: float) -> Ledger:
    """The ledger from S3 alone, for a run whose ConfigMap is gone (deleted, or a recreated run)."""
    progress = progress_from_keys(storage.list(layout.samples(run)))
    results = {}
    for sample, seen in progress.items():
        for attempt in seen.committed:
            committed = read_committed(storage, run, sample, attempt)
            if committed is not None:
                results[(sample, attempt)] = committed
    return rebuild(progress, results, now)


def write_segment(storage: Storage, run: str, number: int, entries: Ledger) -> None:
    storage.put_text(layout.ledger_segment(run, number), encode_segment(entries))


def read_segments(storage: Storage, run: str, count: int) -> list[Ledger]:
    """Segments 1..count in order (a ConfigMap counts only segments written before it)."""
    return [decode_segment(storage.get_text(layout.ledger_segment(run, number))) for number in range(1, count + 1)]


def ready_rate(infos: list[Mapping], figure: str = "submission_ready") -> float | None:
    """A package figure (submission_ready, completed) over all packages (one per repeat), weighted by their samples."""
    weighted = [(float(i[figure]), int((i.get("counts") or {}).get("total") or 1)) for i in infos if i.get(figure) is not None]
    total = sum(w for _, w in weighted)
    return round(sum(r * w for r, w in weighted) / total, 4) if total else None


def read_submission(storage: Storage, run: str) -> Submission:
    """The submission URI and ready rate from the packages' submission_info.json (written last)."""
    root = layout.submission(run)
    keys = [k for k in storage.list(root) if k.endswith(f"/{layout.SUBMISSION_INFO}")]
    if not keys:
        raise NotFound(f"{storage.url(layout.package_info(root))} does not exist")
    infos = [json.loads(storage.get_text(k)) for k in keys]
    report = storage.url(layout.report(run)) if storage.exists(layout.report(run)) else None
    text_only = [bool(i["grading_text_only"]) for i in infos if i.get("grading_text_only") is not None]
    return Submission(
        uri=storage.url(root),
        ready_rate=ready_rate(infos),
        completed_rate=ready_rate(infos, "completed"),
        report_uri=report,
        grading_ready_rate=ready_rate(infos, "grading_ready"),
        grading_text_only=any(text_only) if text_only else None,
    )


def read_estimate(storage: Storage, run: str, method: JudgeMethod = DEFAULT_JUDGE_METHOD) -> JudgeEstimate:
    """The run-level figures of the judge's results (rubric, pairwise against the gold, or both), or a failed
    estimate saying which cannot be read."""
    estimate = JudgeEstimate(state="Succeeded", method=method, label=LABEL)
    if method != "pairwise":
        estimate = _rubric_estimate(storage, run).model_copy(update={"method": method})
        if estimate.state == "Failed":
            return estimate
    if method != "rubric":
        pairs = load_pair_results(storage, run)
        if pairs is None:
            problem = "the judge Job finished but its pairwise results.json is missing or unreadable"
            return JudgeEstimate(state="Failed", method=method, message=problem, label=PAIRWISE_LABEL)
        uri = storage.url(layout.judge_pair_results(run, GOLD))
        update = {"pairwise": pairwise_estimate(pairs.overall, uri), "label": estimate.label if method == "both" else pairs.label}
        estimate = estimate.model_copy(update=update)
    return estimate


def _rubric_estimate(storage: Storage, run: str) -> JudgeEstimate:
    """The rubric judge's run-level figures (points over max points), or a failed estimate saying why they cannot be read."""
    try:
        results = load_results(storage, run)
    except (NotFound, ValidationError, ValueError) as exc:
        results, problem = None, f"{exc.__class__.__name__}: {exc}"[:500]
    else:
        problem = "no results.json"
    if results is None:
        return JudgeEstimate(state="Failed", message=f"the judge Job finished but its results are unreadable: {problem}", label=LABEL)
    total = results.overall
    uri = storage.url(layout.judge_results(run))
    return JudgeEstimate(
        state="Succeeded",
        score=total.score,
        points=total.points,
        max_points=total.max_points,
        scored=total.scored,
        failed=total.failed,
        results_uri=uri,
        message=f"judged by {results.judge_model}: {total.scored} scored, {total.failed} judge failures",
        label=results.label,
    )

"""Every key of the storage layout in ARCHITECTURE.md, built and parsed here and nowhere else.

Keys are relative to the storage root (a local folder or an S3 prefix).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# File names, by the folder they live in: a run, an attempt, a submission package.
RUN_JSON, MANIFEST, RESULTS_PARQUET = "run.json", "manifest.jsonl", "results.parquet"
RESULT, TRANSCRIPT, DELIVERABLES = "result.json", "transcript.jsonl", "deliverable_files"
# Kept by an attempt the run budget cut: the next attempt goes on from its conversation and workspace.
CONVERSATION, WORKSPACE = "conversation.json", "workspace"
SUBMISSION_PARQUET, SUBMISSION_INFO = "data/train-00000-of-00001.parquet", "submission_info.json"

_ATTEMPT = re.compile(r"^runs/(?P<run>[^/]+)/samples/(?P<sample>[^/]+)/attempt-(?P<n>\d+)/(?P<rest>.+)$")


def dataset_refs(dataset_key: str) -> str:
    return f"datasets/{dataset_key}/reference_files"


def dataset_ref(dataset_key: str, path: str) -> str:
    """The mirrored copy of a dataset row's `reference_files/<hash>/<name>`."""
    return f"{dataset_refs(dataset_key)}/{path.removeprefix('reference_files/')}"


def cluster_run(namespace: str, name: str, uid: str) -> str:
    """A GdpvalRun's folder name under runs/: readable, and unique to one run, so two runs of one name
    (other namespaces, other clusters, a deleted and recreated run) never share state in a bucket."""
    return f"{namespace}.{name}-{re.sub('[^a-z0-9]', '', uid.lower())[:8]}"


def run_root(run: str) -> str:
    return f"runs/{run}"


def run_json(run: str) -> str:
    return f"{run_root(run)}/{RUN_JSON}"


def manifest(run: str) -> str:
    return f"{run_root(run)}/{MANIFEST}"


def entries(run: str) -> str:
    return f"{run_root(run)}/entries"


def entry(run: str, sample: str) -> str:
    """One sample's manifest entry on its own, so a sample pod reads a few KB, not the whole manifest."""
    return f"{entries(run)}/{sample}.json"


def ledger_segment(run: str, number: int) -> str:
    """One batch of the operator's ledger entries for ended attempts (the ConfigMap keeps those in flight)."""
    return f"{run_root(run)}/ledger/segment-{number:06d}.json"


def samples(run: str) -> str:
    return f"{run_root(run)}/samples"


def sample_root(run: str, sample: str) -> str:
    return f"{samples(run)}/{sample}"


def attempt_root(run: str, sample: str, attempt: int) -> str:
    return f"{sample_root(run, sample)}/attempt-{attempt}"


@dataclass(frozen=True)
class AttemptKeys:
    """The keys of one attempt, for code that writes them (result.json last: the commit marker)."""

    root: str
    result: str
    transcript: str
    deliverables: str
    conversation: str
    workspace: str


def attempt_keys(run: str, sample: str, attempt: int) -> AttemptKeys:
    root = attempt_root(run, sample, attempt)
    return AttemptKeys(root, f"{root}/{RESULT}", f"{root}/{TRANSCRIPT}", f"{root}/{DELIVERABLES}", f"{root}/{CONVERSATION}", f"{root}/{WORKSPACE}")


def result(run: str, sample: str, attempt: int) -> str:
    return attempt_keys(run, sample, attempt).result


def deliverables(run: str, sample: str, attempt: int) -> str:
    return attempt_keys(run, sample, attempt).deliverables


@dataclass(frozen=True)
class AttemptFile:
    """A key under an attempt, parsed: `rest` is the path inside the attempt folder."""

    run: str
    sample: str
    attempt: int
    rest: str

    @property
    def is_result(self) -> bool:
        return self.rest == RESULT

    @property
    def deliverable(self) -> str | None:
        """The path under deliverable_files/, or None for the attempt's other files."""
        prefix = f"{DELIVERABLES}/"
        return self.rest.removeprefix(prefix) if self.rest.startswith(prefix) else None


def parse_attempt_key(key: str) -> AttemptFile | None:
    match = _ATTEMPT.match(key)
    if not match:
        return None
    return AttemptFile(match["run"], match["sample"], int(match["n"]), match["rest"])


def results_parquet(run: str) -> str:
    return f"{run_root(run)}/{RESULTS_PARQUET}"


def report(run: str) -> str:
    """The run's self-contained HTML report, beside its results (relative links reach the attempts)."""
    return f"{run_root(run)}/report.html"


def report_text_copy(run: str, sample: str, attempt: int, deliverable: str) -> str:
    """Where the report keeps a text copy of a deliverable a browser would run (see gdpval.report.render.passive)."""
    return f"{run_root(run)}/report_files/{sample}/attempt-{attempt}/{deliverable}.txt"


def submission(run: str) -> str:
    return f"{run_root(run)}/submission"


def package(run: str, repeat: int, repeats: int) -> str:
    """One submission package per repeat; a single-repeat run has its package at the root."""
    root = submission(run)
    return root if repeats == 1 else f"{root}/repeat-{repeat}"


def package_parquet(package_root: str) -> str:
    return f"{package_root}/{SUBMISSION_PARQUET}"


def package_info(package_root: str) -> str:
    return f"{package_root}/{SUBMISSION_INFO}"


def package_deliverable(package_root: str, task_id: str, relpath: str) -> str:
    return f"{package_root}/{package_relpath(task_id, relpath)}"


def package_relpath(task_id: str, relpath: str) -> str:
    """A deliverable's path as the submission parquet lists it (relative to the package root)."""
    return f"{DELIVERABLES}/{task_id}/{relpath}"


def check_results(run: str) -> str:
    """`gdpval check`'s grading readiness of the run's committed deliverables."""
    return f"{run_root(run)}/check.json"


def judge_root(run: str) -> str:
    """The local rubric judge's files: an estimate beside the run, never part of the submission."""
    return f"{run_root(run)}/judge"


def judge_samples(run: str) -> str:
    return f"{judge_root(run)}/samples"


def judge_sample(run: str, sample: str) -> str:
    """One sample's judged scores: the cache that lets a judge run resume."""
    return f"{judge_samples(run)}/{sample}.json"


def judge_results(run: str) -> str:
    return f"{judge_root(run)}/results.json"


def judge_only(dataset_key: str) -> str:
    """The gold of one dataset revision: read by the judge alone, never staged to a sample, never in a package."""
    return f"judge-only/{dataset_key}"


def gold_index(dataset_key: str) -> str:
    """Which gold files of the revision are mirrored, per task (written after the files it lists)."""
    return f"{judge_only(dataset_key)}/gold.json"


def gold_file(dataset_key: str, path: str) -> str:
    """The mirrored copy of a dataset row's `deliverable_files/<hash>/<name>`."""
    return f"{judge_only(dataset_key)}/{path}"


def judge_spend(run: str, method: str, model_key: str, sample: str) -> str:
    """What one sample's judge calls spent (gdpval.judge.spend), one record per answered call, by method and model."""
    return f"{judge_root(run)}/spend/{method}/{model_key}/{sample}"


def judge_pairs(run: str, against: str) -> str:
    """Pairwise verdicts of a run's samples against `against` (the gold, or another run)."""
    return f"{judge_root(run)}/pairwise/{against}"


def model_key(model: str) -> str:
    """A judge model's name as a path segment: the same for the same name, whatever characters it has."""
    return hashlib.sha256(model.encode()).hexdigest()[:16]


def judge_models(run: str, against: str) -> str:
    """Each judge model's own verdicts and results, so a second judge never replaces the first's."""
    return f"{judge_pairs(run, against)}/models"


def judge_model_root(run: str, against: str, model: str) -> str:
    return f"{judge_models(run, against)}/{model_key(model)}"


def judge_pair(run: str, against: str, model: str, sample: str) -> str:
    """One sample's pairwise verdict by one judge model, written once both orders are judged: the cache that lets judging resume."""
    return f"{judge_model_root(run, against, model)}/samples/{sample}.json"


def legacy_judge_pairs(run: str, against: str) -> str:
    """Where verdicts were stored before they were kept per judge model (still read on resume)."""
    return f"{judge_pairs(run, against)}/samples"


def judge_model_results(run: str, against: str, model: str) -> str:
    return f"{judge_model_root(run, against, model)}/results.json"


def judge_pair_results(run: str, against: str) -> str:
    """The latest pairwise judging's results (any model): what the report and the operator read."""
    return f"{judge_pairs(run, against)}/results.json"


def judge_call(digest: str) -> str:
    """One judge call's reply, keyed by the digest of everything it was asked (shared by every run in the storage)."""
    return f"judge-calls/{digest[:2]}/{digest}.json"


def judge_pages(run: str, against: str) -> str:
    """Page images of the judged run's (and another run's) deliverables, as the pairwise judge saw them."""
    return f"{judge_pairs(run, against)}/pages"


def gold_pages(dataset_key: str) -> str:
    """Page images of the gold as the judge saw them: judge-only like the gold itself."""
    return f"{judge_only(dataset_key)}/pages"


def page(root: str, digest: str) -> str:
    """One PNG page under `root`, named by the sha256 of its bytes (written once, shared by every sample showing it)."""
    return f"{root}/{digest}.png"


def best_of_n_package(run: str) -> str:
    """The optional best-of-N package (a task's repeat chosen by the pairwise judge), apart from the per-repeat packages."""
    return f"{run_root(run)}/submission-best-of-n"

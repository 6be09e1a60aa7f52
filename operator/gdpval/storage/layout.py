"""Keys of the storage layout in ARCHITECTURE.md, relative to the storage root."""

from __future__ import annotations

RESULT = "result.json"


def dataset_refs(dataset_key: str) -> str:
    return f"datasets/{dataset_key}/reference_files"


def run_root(run: str) -> str:
    return f"runs/{run}"


def run_json(run: str) -> str:
    return f"runs/{run}/run.json"


def manifest(run: str) -> str:
    return f"runs/{run}/manifest.jsonl"


def samples(run: str) -> str:
    return f"runs/{run}/samples"


def sample_root(run: str, sample: str) -> str:
    return f"runs/{run}/samples/{sample}"


def attempt_root(run: str, sample: str, attempt: int) -> str:
    return f"runs/{run}/samples/{sample}/attempt-{attempt}"


def result(run: str, sample: str, attempt: int) -> str:
    return f"{attempt_root(run, sample, attempt)}/{RESULT}"


def transcript(run: str, sample: str, attempt: int) -> str:
    return f"{attempt_root(run, sample, attempt)}/transcript.jsonl"


def deliverables(run: str, sample: str, attempt: int) -> str:
    return f"{attempt_root(run, sample, attempt)}/deliverable_files"


def results_parquet(run: str) -> str:
    return f"runs/{run}/results.parquet"


def submission(run: str) -> str:
    return f"runs/{run}/submission"

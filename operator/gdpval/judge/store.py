"""Reading and writing the judge's files (keys from storage.layout); the report reads scores here."""

from __future__ import annotations

from pydantic import ValidationError

from gdpval.judge.models import JudgeResults, SampleScore
from gdpval.judge.verdicts import PairResults
from gdpval.storage import NotFound, Storage, layout

GOLD = "gold"  # the pairwise judge's other side when it is the experts' deliverables


def load_scores(storage: Storage, run: str) -> dict[str, SampleScore]:
    """Every sample judged so far, by sample id (empty when the run was never judged); unreadable files are skipped."""
    scores = {}
    for key in storage.list(layout.judge_samples(run)):
        score = read_score(storage, key)
        if score is not None:
            scores[score.sample_id] = score
    return scores


def read_score(storage: Storage, key: str) -> SampleScore | None:
    try:
        return SampleScore.model_validate_json(storage.get_bytes(key))
    except (NotFound, ValidationError):
        return None


def write_score(storage: Storage, run: str, score: SampleScore) -> None:
    storage.put_text(layout.judge_sample(run, score.sample_id), score.model_dump_json(indent=2) + "\n")


def load_results(storage: Storage, run: str) -> JudgeResults | None:
    """The last judge run's results.json, or None when there is none."""
    try:
        return JudgeResults.model_validate_json(storage.get_bytes(layout.judge_results(run)))
    except NotFound:
        return None


def write_results(storage: Storage, results: JudgeResults) -> str:
    key = layout.judge_results(results.run_name)
    storage.put_text(key, results.model_dump_json(indent=2) + "\n")
    return storage.url(key)


def load_pair_results(storage: Storage, run: str, against: str = GOLD) -> PairResults | None:
    """The last pairwise judging's results.json against `against`, or None when there is none (or it is unreadable)."""
    try:
        return PairResults.model_validate_json(storage.get_bytes(layout.judge_pair_results(run, against)))
    except (NotFound, ValidationError):
        return None

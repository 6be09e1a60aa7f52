"""The local rubric judge: a judge model scores a run's deliverables against each task's rubric_json.

Its figures are a local estimate, never the official GDPval grade (OpenAI grades submissions).
"""

from gdpval.judge.models import LABEL, JudgeResults, SampleScore
from gdpval.judge.store import load_results, load_scores

__all__ = ["LABEL", "JudgeResults", "SampleScore", "load_results", "load_scores"]

"""The local judges: a judge model scores a run's deliverables against each task's rubric_json (`run`, the
rubric judge), or compares them with the experts' gold or another run's, in both orders (`pairwise`);
`request` holds what both send and retry, `command` the CLI. Their figures are a local estimate, never the
official GDPval grade (OpenAI grades submissions).
The names below load on first use: the CLI registers `gdpval judge` from this package, and every
sample pod's commands would otherwise build the judge's models at start (issue 11).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gdpval.lazy import loader

if TYPE_CHECKING:
    from gdpval.judge.models import LABEL as LABEL
    from gdpval.judge.models import JudgeResults as JudgeResults
    from gdpval.judge.models import SampleScore as SampleScore
    from gdpval.judge.store import load_results as load_results
    from gdpval.judge.store import load_scores as load_scores

_HOMES = {
    "LABEL": "gdpval.judge.models",
    "JudgeResults": "gdpval.judge.models",
    "SampleScore": "gdpval.judge.models",
    "load_results": "gdpval.judge.store",
    "load_scores": "gdpval.judge.store",
}
__all__ = list(_HOMES)

__getattr__ = loader(__name__, _HOMES)

"""The report's grading figures: the pairwise estimate against the gold, consistency across repeats,
grading readiness, and what the judge was shown for a few samples (pure: records in, figures out)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gdpval.judge.verdicts import PairResults, PairScore
from gdpval.submission.readiness import CheckResults, current_share

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SHOWN_SAMPLES = 6  # samples whose judged pages the report shows
EMBEDDED_PAGES = 24  # page images embedded in the report, over all samples (the rest are linked)


class Shown(BaseModel):
    """One page the judge was shown: embedded when it is the judged run's and a PNG, else linked by its key."""

    side: str  # "model" (the judged run) or "expert" / "other run"
    file: str
    index: int
    key: str
    png: bytes | None = None


class SampleSeen(BaseModel):
    """One judged sample: its verdict, both replies' reasons, the views' summaries and their pages."""

    sample_id: str
    verdict: str
    inconsistent: bool
    reasons: list[str]
    views: list[str]
    pages: list[Shown]


class Pairwise(BaseModel):
    """The stored pairwise results (totals, groups, consistency, spend) and the samples whose pages the report shows."""

    results: PairResults
    seen: list[SampleSeen] = Field(default_factory=list)


class Problem(BaseModel):
    sample_id: str
    problems: list[str]
    fonts_substituted: list[str] = Field(default_factory=list)


class Readiness(BaseModel):
    """`gdpval check`'s figures: the grading-ready share (None when check.json is missing or stale) and each sample's problems."""

    grading_ready: float | None
    checked: int
    problems: list[Problem]
    renderer: str = ""
    text_only: bool = False  # no LibreOffice where the check ran: pages, sheets and slides not counted


class Grading(BaseModel):
    pairwise: Pairwise | None = None
    readiness: Readiness | None = None


def shown_keys(results: PairResults) -> list[str]:
    """Keys of the judged run's pages to embed, in sample order, capped (the I/O reads only these)."""
    keys: list[str] = []
    for score in _seen_scores(results):
        keys += [p.key for p in score.pages if p.side == "ours" and p.key not in keys]
    return keys[:EMBEDDED_PAGES]


def _seen_scores(results: PairResults) -> list[PairScore]:
    return [s for s in results.samples if s.pages][:SHOWN_SAMPLES]


def pairwise(results: PairResults, pngs: dict[str, bytes]) -> Pairwise:
    """The stored results as report figures; `pngs` holds the embedded pages' bytes by key (anything not a PNG is linked instead)."""
    other = "expert" if results.against == "gold" else "other run"
    seen = []
    for score in _seen_scores(results):
        pages = []
        for page in score.pages:
            png = pngs.get(page.key) if page.side == "ours" else None
            embedded = png if png is not None and png.startswith(PNG_SIGNATURE) else None
            pages.append(Shown(side="model" if page.side == "ours" else other, file=page.file, index=page.index, key=page.key, png=embedded))
        reasons = [f"{r.order}: {r.reason or r.error}" for r in score.replies]
        seen.append(
            SampleSeen(sample_id=score.sample_id, verdict=score.verdict, inconsistent=score.inconsistent, reasons=reasons, views=score.views, pages=pages)
        )
    return Pairwise(results=results, seen=seen)


def readiness(check: CheckResults, committed: dict[str, int | None]) -> Readiness:
    problems = [
        Problem(sample_id=c.sample_id, problems=c.problems, fonts_substituted=c.fonts_substituted) for c in check.samples if c.problems or c.fonts_substituted
    ]
    share = current_share(check, committed)
    return Readiness(grading_ready=share, checked=len(check.samples), problems=problems, renderer=check.renderer, text_only=check.text_only)


def grading(results: PairResults | None, pngs: dict[str, bytes], check: CheckResults | None, committed: dict[str, int | None]) -> Grading:
    return Grading(
        pairwise=pairwise(results, pngs) if results is not None else None,
        readiness=readiness(check, committed) if check is not None else None,
    )

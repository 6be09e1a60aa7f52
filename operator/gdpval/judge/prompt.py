"""The judge request for one sample: the task, the answer and files as views, the rubric, bounded in size."""

from __future__ import annotations

import base64
from typing import Any

from gdpval.judge import wire
from gdpval.judge.convert import View, bounded
from gdpval.judge.models import RubricItem

TEXT_PER_SAMPLE = 120_000
IMAGES_PER_SAMPLE = 8
PROMPT_MAX = 20_000

SYSTEM = (
    "You grade one deliverable of a professional task against its rubric. Each rubric item names the most points it can "
    "score; give each item a score from 0 to that number (partial credit only where the item allows it) and a reason of "
    "one line. Judge only what the deliverable shows: the files are given as extracted text (spreadsheet cells with "
    "values and formulas, document text and tables, slide text, PDF text) and as images. Answer with the JSON asked for."
)


def messages(prompt: str, answer: str, views: list[View], items: list[RubricItem]) -> list[dict[str, Any]]:
    """System and user messages; the text of the files shares one budget, in the order the files came."""
    parts: list[dict[str, Any]] = [_text(f"# Task\n{bounded(prompt, PROMPT_MAX)}"), _text(f"# Final answer text\n{bounded(answer, PROMPT_MAX) or '(none)'}")]
    budget, images = TEXT_PER_SAMPLE, 0
    for view in views:
        text = bounded(view.text, max(0, budget))
        budget -= len(text)
        parts.append(_text(f"# File {view.name!r} ({view.kind})\n{text}"))
        for png in view.images[: max(0, IMAGES_PER_SAMPLE - images)]:
            parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}})
            images += 1
    if not views:
        parts.append(_text("# Files\n(no deliverable files)"))
    rubric = [{"item_id": item.item_id, "points": item.points, "criterion": item.criterion} for item in items]
    parts.append(_text(wire.rubric_text(rubric)))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": parts}]


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}

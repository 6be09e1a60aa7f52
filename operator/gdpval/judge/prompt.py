"""The judge requests: the task with its reference files, the deliverables as views, bounded in size.

The rubric request shows one deliverable and the rubric; the pairwise request shows two unlabeled
deliverable sets, A and B, rendered by the same conversion, and asks which is better.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from gdpval.judge import wire
from gdpval.judge.convert import View, bounded
from gdpval.judge.models import RubricItem

TEXT_PER_SAMPLE = 120_000
IMAGES_PER_SAMPLE = 8
REFERENCE_TEXT = 60_000  # the task's reference files share this budget
REFERENCE_IMAGES = 4
PROMPT_MAX = 20_000

SYSTEM = (
    "You grade one deliverable of a professional task against its rubric. Each rubric item names the most points it can "
    "score; give each item a score from 0 to that number (partial credit only where the item allows it) and a reason of "
    "one line. Judge only what the deliverable shows: the files are given as extracted text (spreadsheet cells with "
    "values and formulas, document text and tables, slide text, PDF text) and as images. The task's reference files, "
    "given the same way, are the inputs the task refers to, not part of the deliverable. Answer with the JSON asked for."
)

PAIRWISE_SYSTEM = (
    "You compare two deliverables made for the same professional task, set A and set B, as an expert in the task's "
    "occupation would when choosing which one to send to the client. Weigh correctness, completeness, following the "
    "task's instructions, and the quality and format of the files. The task's reference files are its inputs. The files "
    "are given as extracted text (spreadsheet cells with values and formulas, document text and tables, slide text, PDF "
    'text) and as images; judge what they show, not their names or order. Answer "A" or "B" for the better set, or '
    '"tie" only when neither is better, with a reason of a few lines, in the JSON asked for.'
)


@dataclass(frozen=True)
class Deliverable:
    """One side of a comparison: the final answer text and the files' views."""

    answer: str
    views: list[View]


def messages(prompt: str, answer: str, views: list[View], items: list[RubricItem], references: list[View] | None = None) -> list[dict[str, Any]]:
    """System and user messages; the text of the files shares one budget, in the order the files came."""
    parts = [*_task(prompt, references or []), _text(f"# Final answer text\n{bounded(answer, PROMPT_MAX) or '(none)'}")]
    parts += _files(views, TEXT_PER_SAMPLE, IMAGES_PER_SAMPLE) if views else [_text("# Files\n(no deliverable files)")]
    rubric = [{"item_id": item.item_id, "points": item.points, "criterion": item.criterion} for item in items]
    parts.append(_text(wire.rubric_text(rubric)))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": parts}]


def pairwise_messages(prompt: str, references: list[View], first: Deliverable, second: Deliverable) -> list[dict[str, Any]]:
    """The task, then set A (`first`) and set B (`second`) under the same budgets, then the question."""
    parts = _task(prompt, references)
    for letter, side in (("A", first), ("B", second)):
        parts.append(_text(f"{wire.SET_HEADER}{letter}"))
        parts.append(_text(f"# Final answer text\n{bounded(side.answer, PROMPT_MAX) or '(none)'}"))
        parts += _files(side.views, TEXT_PER_SAMPLE // 2, IMAGES_PER_SAMPLE // 2) if side.views else [_text("# Files\n(no files)")]
    parts.append(_text(f"{wire.SETS_END}\nWhich set is the better deliverable for the task: A, B, or tie?"))
    return [{"role": "system", "content": PAIRWISE_SYSTEM}, {"role": "user", "content": parts}]


def _task(prompt: str, references: list[View]) -> list[dict[str, Any]]:
    parts = [_text(f"# Task\n{bounded(prompt, PROMPT_MAX)}")]
    if references:
        parts.append(_text("# Reference files of the task (its inputs)"))
        parts += _files(references, REFERENCE_TEXT, REFERENCE_IMAGES, heading="Reference file")
    return parts


def _files(views: list[View], budget: int, most_images: int, heading: str = "File") -> list[dict[str, Any]]:
    """Each view's text within a shared budget, and its images up to `most_images` in all."""
    parts: list[dict[str, Any]] = []
    images = 0
    for view in views:
        text = bounded(view.text, max(0, budget))
        budget -= len(text)
        parts.append(_text(f"# {heading} {view.name!r} ({view.kind})\n{text}"))
        for png in view.images[: max(0, most_images - images)]:
            parts.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}})
            images += 1
    return parts


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}

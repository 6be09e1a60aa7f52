"""The judge request's shape, read by both the judge and the scripted model's judge mode.

Standard library only, so the scripted model can import it wherever it runs.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_NAME = "gdpval_rubric_scores"
RUBRIC_HEADER = "RUBRIC ITEMS (JSON):"


def reply_schema() -> dict[str, Any]:
    """One score and a one-line reason per rubric item, nothing else (strict structured output)."""
    item = {
        "type": "object",
        "properties": {"item_id": {"type": "string"}, "score": {"type": "number"}, "reason": {"type": "string"}},
        "required": ["item_id", "score", "reason"],
        "additionalProperties": False,
    }
    return {"type": "object", "properties": {"scores": {"type": "array", "items": item}}, "required": ["scores"], "additionalProperties": False}


def response_format() -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": reply_schema()}}


def rubric_text(items: list[dict[str, Any]]) -> str:
    """The rubric as its own text part: `item_id`, `points` (the most an item can score) and `criterion`."""
    return f"{RUBRIC_HEADER}\n{json.dumps(items, ensure_ascii=False)}"


def is_judge_request(body: dict[str, Any]) -> bool:
    response = body.get("response_format")
    return isinstance(response, dict) and isinstance(response.get("json_schema"), dict) and response["json_schema"].get("name") == SCHEMA_NAME


def rubric_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The rubric items a judge request carries, or None when it carries none readable."""
    for message in messages:
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and text.startswith(RUBRIC_HEADER):
                try:
                    items = json.loads(text[len(RUBRIC_HEADER) :])
                except ValueError:
                    return None
                return items if isinstance(items, list) and all(isinstance(i, dict) for i in items) else None
    return None


PAIRWISE_SCHEMA_NAME = "gdpval_pairwise_verdict"
SET_HEADER = "DELIVERABLE SET "  # then "A" or "B": the parts after it, up to the next header, are that set
SETS_END = "END OF DELIVERABLE SETS"
CHOICES = ("A", "B", "tie")


def pairwise_response_format() -> dict[str, Any]:
    """Which set is better ("A", "B", or "tie" when neither is), with a short reason (strict structured output)."""
    schema = {
        "type": "object",
        "properties": {"reason": {"type": "string"}, "better": {"type": "string", "enum": list(CHOICES)}},
        "required": ["reason", "better"],
        "additionalProperties": False,
    }
    return {"type": "json_schema", "json_schema": {"name": PAIRWISE_SCHEMA_NAME, "strict": True, "schema": schema}}


def is_pairwise_request(body: dict[str, Any]) -> bool:
    response = body.get("response_format")
    return isinstance(response, dict) and isinstance(response.get("json_schema"), dict) and response["json_schema"].get("name") == PAIRWISE_SCHEMA_NAME


def sets_of(messages: list[dict[str, Any]]) -> dict[str, str] | None:
    """The text of each deliverable set a pairwise request shows, by its letter; None when it shows no two sets."""
    sets: dict[str, list[str]] = {}
    current: str | None = None
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str):
                continue
            if text.startswith(SET_HEADER):
                current = text[len(SET_HEADER) :].split("\n", 1)[0].strip()
                sets[current] = []
            elif text.startswith(SETS_END):
                current = None
            elif current is not None:
                sets[current].append(text)
    return {name: "\n".join(parts) for name, parts in sets.items()} if set(sets) == {"A", "B"} else None

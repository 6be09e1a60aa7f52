"""Context policies: what of a long conversation is sent to the model.

'none' (the default, the benchmark's behaviour) sends everything, so a long task may end at the
model's context limit. 'elide' replaces the output of the oldest tool calls (and the pictures of the
oldest `view` calls) with a marker once the conversation's estimated size passes a budget; the latest
turn's results are always kept whole.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from gdpval.agent.images import IMAGE_TOKENS, is_images_message, without_pixels
from gdpval.agent.prompt import ELIDED

CHARS_PER_TOKEN = 4  # a rough, tokenizer-free estimate; the budget is a guide, not a guarantee


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """Characters over four, a picture counted as IMAGE_TOKENS rather than by its base64 size."""
    pictures = sum(1 for m in messages if is_images_message(m) for part in m["content"] if part.get("type") == "image_url")
    text = json.dumps([without_pixels(m) for m in messages], ensure_ascii=False)
    return math.ceil(len(text) / CHARS_PER_TOKEN) + pictures * IMAGE_TOKENS


@dataclass(frozen=True)
class Elided:
    """What one pass of the policy did: the calls whose output went, and the estimates around it."""

    tool_call_ids: list[str] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0


def elide_old_output(messages: list[dict[str, Any]], budget_tokens: int) -> tuple[list[dict[str, Any]], Elided]:
    """`messages` within `budget_tokens` as far as eliding old tool results can take them (oldest first)."""
    before = estimate_tokens(messages)
    if before <= budget_tokens:
        return messages, Elided(tokens_before=before, tokens_after=before)
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=len(messages))
    out = list(messages)
    size, ids = before, []
    for index, message in enumerate(messages[:last_assistant]):
        if size <= budget_tokens:
            break
        pictures = is_images_message(message)
        if (message.get("role") != "tool" and not pictures) or message.get("content") == ELIDED:
            continue
        out[index] = {**message, "content": ELIDED}
        size -= estimate_tokens([message]) - estimate_tokens([out[index]])
        ids.append("pictures" if pictures else message.get("tool_call_id", ""))
    return out, Elided(ids, before, estimate_tokens(out))

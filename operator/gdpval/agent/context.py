"""Context policies: what of a long conversation is sent to the model.

'none' (the default, the benchmark's behaviour) sends everything, so a long task may end at the
model's context limit. 'elide' replaces the output of the oldest tool calls with a marker once the
conversation's estimated size passes a budget; the latest turn's results are always kept whole.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from gdpval.agent.prompt import ELIDED

CHARS_PER_TOKEN = 4  # a rough, tokenizer-free estimate; the budget is a guide, not a guarantee


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    return math.ceil(len(json.dumps(messages, ensure_ascii=False)) / CHARS_PER_TOKEN)


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
        if message.get("role") != "tool" or message.get("content") == ELIDED:
            continue
        out[index] = {**message, "content": ELIDED}
        size -= math.ceil((len(json.dumps(message["content"], ensure_ascii=False)) - len(json.dumps(ELIDED))) / CHARS_PER_TOKEN)
        ids.append(message.get("tool_call_id", ""))
    return out, Elided(ids, before, estimate_tokens(out))

"""A judge's spend, apart from the agent's: calls, tokens, and cost at optional prices per million tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


class Usage(BaseModel):
    """A judge's spend: calls made, tokens, and cost when prices were given (cached calls are free)."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None

    def __add__(self, other: Usage) -> Usage:
        cost = None if self.cost is None and other.cost is None else round((self.cost or 0) + (other.cost or 0), 6)
        return Usage(
            calls=self.calls + other.calls,
            cached_calls=self.cached_calls + other.cached_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost=cost,
        )


@dataclass(frozen=True)
class Prices:
    """Optional prices per million tokens, for the judge's cost."""

    prompt: float
    completion: float

    def cost(self, usage: Usage) -> float:
        return round((usage.prompt_tokens * self.prompt + usage.completion_tokens * self.completion) / 1e6, 6)


def usage_of(completion: Any, prices: Prices | None) -> Usage:
    """One call's spend as the server reported it (no usage block: tokens 0), priced when prices were given."""
    spent = getattr(completion, "usage", None)
    usage = Usage(calls=1, prompt_tokens=getattr(spent, "prompt_tokens", 0) or 0, completion_tokens=getattr(spent, "completion_tokens", 0) or 0)
    return usage.model_copy(update={"cost": prices.cost(usage)}) if prices else usage

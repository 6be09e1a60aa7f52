"""Spending: what a model answer cost, and whether the run or a sample may make another call. Pure.

Below both the agent (which counts its calls) and the controller (which stops a GdpvalRun).

Tokens count input plus output; money needs the run's prices (`budget.prices`). A limit is reached
when the spend is at or above it: the call that crossed it was already paid for, so a run stops
within the calls in flight of its limit, well within one sample's spend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gdpval.sample import Usage
from gdpval.settings import BudgetSettings, PriceSettings


@dataclass
class Spend:
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0

    def add(self, usage: Usage, prices: PriceSettings, cost: float | None = None) -> None:
        """Count `usage`, at `cost` when it is known (a committed result's), else at `prices`."""
        self.usage = self.usage.add(usage)
        if cost is None:
            cost = prices.cost(usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
        self.cost += cost or 0.0

    def describe(self, prices: PriceSettings) -> str:
        money = f", cost {self.cost:,.4f}" if prices.known else ""
        return f"{self.usage.total:,} tokens{money}"


def usage_of(body: Any) -> Usage | None:
    """The usage of a chat completion body (the cached input tokens where the server tells them)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(input_tokens=_count(usage.get("prompt_tokens")), output_tokens=_count(usage.get("completion_tokens")), cached_input_tokens=_count(cached))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def run_limit_reached(budget: BudgetSettings, spent: Spend) -> str | None:
    """Why the run may make no more calls, or None."""
    return _reached(budget.run_tokens, budget.run_cost, spent, "run")


def run_stop_line(budget: BudgetSettings, spent: Spend) -> str | None:
    """What a run its budget stopped reads in its status ("run budget (N tokens of M)"), or None."""
    if budget.run_tokens is not None and spent.usage.total >= budget.run_tokens:
        return f"run budget ({spent.usage.total:,} tokens of {budget.run_tokens:,})"
    if budget.run_cost is not None and spent.cost >= budget.run_cost:
        return f"run budget (cost {spent.cost:,.4f} of {budget.run_cost:,.4f})"
    return None


def sample_limit_reached(budget: BudgetSettings, spent: Spend) -> str | None:
    """Why this sample attempt may make no more calls, or None."""
    return _reached(budget.sample_tokens, budget.sample_cost, spent, "sample")


def _reached(tokens: int | None, cost: float | None, spent: Spend, scope: str) -> str | None:
    flag = f"--{scope}-tokens"
    if tokens is not None and spent.usage.total >= tokens:
        return f"the {scope} budget of {tokens:,} tokens is spent ({spent.usage.total:,} tokens; {flag})"
    if cost is not None and spent.cost >= cost:
        return f"the {scope} budget of {cost:,.4f} is spent ({spent.cost:,.4f}; --{scope}-cost)"
    return None

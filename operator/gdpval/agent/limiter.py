"""How many model calls a run makes at once: additive increase, multiplicative decrease (AIMD).

A pure state machine, time passed in. The limit starts at the run's parallelism (its ceiling) and
never goes below one. A rate-limit signal (a 429, or `x-ratelimit-remaining-*` at 0) cuts it by
`decrease`, at most once per round of calls (a signal from a call sent before the last cut says
nothing new), and pauses new calls for the server's `Retry-After` (or until its ratelimit reset).
Each successful call adds 1/limit, about one more call at once per round of successes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

MAX_PAUSE_S = 60.0
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Signal:
    """What one answer says about the rate limit."""

    limited: bool = False  # cut the limit
    pause_s: float = 0.0  # hold new calls this long


def duration_s(text: str) -> float | None:
    """Seconds in a header value: a number ("1.5"), or OpenAI's reset form ("6m0s", "20ms", "1h2m")."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def signal_of(status: int, headers: Mapping[str, str]) -> Signal:
    """Read a 429, `Retry-After` and `x-ratelimit-remaining-{requests,tokens}` (with their resets)."""
    pause = duration_s(headers.get("retry-after", "")) if status == 429 else None
    limited = status == 429
    for kind in ("requests", "tokens"):
        if headers.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0":
            limited = True
            reset = duration_s(headers.get(f"x-ratelimit-reset-{kind}", ""))
            if reset is not None:
                pause = max(pause or 0.0, reset)
    return Signal(limited, min(MAX_PAUSE_S, pause or 0.0))


@dataclass
class Limiter:
    ceiling: int
    decrease: float = 0.75
    limit: float = 0.0  # 0: start at the ceiling
    in_flight: int = 0
    paused_until: float = 0.0
    cut_at: float = -math.inf  # when the limit was last cut
    cuts: int = 0

    def __post_init__(self) -> None:
        self.limit = self.limit or float(self.ceiling)

    @property
    def allowed(self) -> int:
        return max(1, min(self.ceiling, math.floor(self.limit)))

    def acquire(self, now: float) -> float | None:
        """Take a slot (None), or the seconds to wait: the pause left, or 0 to wait for a release."""
        if now < self.paused_until:
            return self.paused_until - now
        if self.in_flight >= self.allowed:
            return 0.0
        self.in_flight += 1
        return None

    def release(self, signal: Signal, sent_at: float, now: float, ok: bool) -> None:
        """A call sent at `sent_at` ended: `ok` is a successful answer."""
        self.in_flight -= 1
        if signal.pause_s:
            self.paused_until = max(self.paused_until, now + signal.pause_s)
        if signal.limited:
            if sent_at >= self.cut_at:
                self.limit = max(1.0, self.limit * self.decrease)
                self.cut_at = now
                self.cuts += 1
        elif ok:
            self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)

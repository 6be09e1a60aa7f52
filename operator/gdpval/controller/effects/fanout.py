"""A pass's independent API and S3 calls, issued together instead of one after another.

At parallelism 500 a pass may delete, probe and create hundreds of pods; at 10 to 40 ms a call in
series that is seconds, and the pass time is how long a finished pod waits to be deleted. One
pool for the whole operator bounds what all runs' passes ask of the API server at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WIDTH = 16  # calls in flight at once, for all runs together (the HTTP pools are sized to match)
_pool: ThreadPoolExecutor | None = None


def _shared() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(WIDTH, thread_name_prefix="gdpval-call")
    return _pool


def in_background(call: Callable[[], object]) -> None:
    """`call` in the shared pool, not waited for: the caller's next pass sees what it did."""
    _shared().submit(call)


def fan_out(call: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`call` over `items`, results in order; the first exception is raised once all have ended."""
    work = list(items)
    if len(work) <= 1:
        return [call(item) for item in work]
    futures = [_shared().submit(call, item) for item in work]
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


async def woken_passes(wake: asyncio.Event, one_pass: Callable[[], Awaitable[float]], pause: float) -> None:
    """Run `one_pass` whenever `wake` is set or the delay it returned is over, at least `pause` seconds apart (a run's
    worker and a pool's share this loop)."""
    delay = 0.0
    while True:
        try:
            await asyncio.wait_for(wake.wait(), timeout=delay)
        except TimeoutError:
            pass
        wake.clear()
        delay = await one_pass()
        await asyncio.sleep(pause)

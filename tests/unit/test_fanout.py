"""Calls of a pass issued together: results in order, every call ended before an error is raised."""

from __future__ import annotations

import threading

import pytest

from gdpval.controller.effects.fanout import WIDTH, fan_out


def test_results_keep_the_order_of_the_items_and_calls_overlap():
    barrier = threading.Barrier(4, timeout=10)  # four calls must be in flight at once to pass it

    def call(x: int) -> int:
        barrier.wait()
        return x * 2

    assert fan_out(call, [1, 2, 3, 4]) == [2, 4, 6, 8]


def test_no_more_than_the_width_is_in_flight():
    lock, live, peak = threading.Lock(), [0], [0]
    release = threading.Event()

    def call(_: int) -> None:
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            if live[0] == WIDTH:
                release.set()
        release.wait(10)
        with lock:
            live[0] -= 1

    fan_out(call, range(WIDTH * 3))
    assert peak[0] == WIDTH


def test_an_error_is_raised_after_every_call_has_ended():
    ended = []

    def call(x: int) -> int:
        if x == 0:
            raise ValueError("refused")
        ended.append(x)
        return x

    with pytest.raises(ValueError, match="refused"):
        fan_out(call, range(20))
    assert sorted(ended) == list(range(1, 20))

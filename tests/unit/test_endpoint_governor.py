"""The run's endpoint governor: the breaker, the AIMD limiter and the budget as pure machines, and
the governor that joins them under the openai client (fed by plain callables, no server)."""

from __future__ import annotations

import threading

import httpx2
import pytest
from pydantic import ValidationError

from gdpval.agent.breaker import Admission, Breaker, BreakerPolicy
from gdpval.agent.governor import CallRefused, Governor, Meter
from gdpval.agent.limiter import Limiter, Signal, duration_s, signal_of
from gdpval.agent.loop import classify
from gdpval.budget import Spend, run_limit_reached, sample_limit_reached, usage_of
from gdpval.sample import ErrorKind, Usage
from gdpval.settings import BudgetSettings, PriceSettings, RunSettings

POLICY = BreakerPolicy(failures=3, first_probe_s=1.0, max_probe_s=4.0)


def test_breaker_opens_only_when_every_recent_call_failed():
    b = Breaker(POLICY)
    assert not b.failed(0) and not b.failed(1)
    b.answered()  # one answer in between: the endpoint is there
    assert not b.failed(2) and not b.failed(3)
    assert b.failed(4) and b.open and b.openings == 1
    assert not b.failed(5)  # already open: no second opening


def test_open_breaker_hands_out_one_probe_at_a_time_with_doubling_delay():
    b = Breaker(POLICY)
    for t in range(3):
        b.failed(t)
    assert b.admit(2.5) == Admission.wait  # first probe 1 s after opening
    assert b.admit(3.0) == Admission.probe
    assert b.admit(3.0) == Admission.wait  # the probe is out
    assert not b.probed(False, 3.0)
    assert b.next_probe_at == 5.0
    assert b.admit(5.0) == Admission.probe and not b.probed(False, 5.0)
    assert b.next_probe_at == 9.0
    assert b.admit(9.0) == Admission.probe and not b.probed(False, 9.0)
    assert b.next_probe_at == 13.0  # capped at max_probe_s
    assert b.admit(13.0) == Admission.probe and b.probed(True, 13.0)
    assert not b.open and b.admit(13.0) == Admission.go and b.failed_in_row == 0


def test_a_late_answer_closes_an_open_breaker():
    b = Breaker(POLICY)
    for t in range(3):
        b.failed(t)
    assert b.answered() and not b.open


def test_limiter_cuts_once_per_round_and_grows_back_to_its_ceiling():
    lim = Limiter(8, decrease=0.5)
    for _ in range(8):
        assert lim.acquire(0.0) is None
    assert lim.acquire(0.0) == 0.0  # all 8 slots taken
    lim.release(Signal(limited=True), sent_at=0.0, now=1.0, ok=False)
    assert lim.limit == 4.0
    lim.release(Signal(limited=True), sent_at=0.0, now=1.1, ok=False)  # sent before the cut: no news
    assert lim.limit == 4.0 and lim.cuts == 1
    lim.release(Signal(limited=True), sent_at=1.0, now=1.2, ok=False)  # sent after it: cut again
    assert lim.limit == 2.0
    for _ in range(5):
        lim.release(Signal(), sent_at=2.0, now=2.0, ok=True)
    assert lim.in_flight == 0
    while lim.limit < 8:
        before = lim.limit
        lim.in_flight += 1
        lim.release(Signal(), sent_at=3.0, now=3.0, ok=True)
        assert lim.limit > before
    assert lim.limit == 8.0


def test_limiter_never_goes_below_one_call_and_honours_a_pause():
    lim = Limiter(2, decrease=0.1)
    lim.in_flight = 1
    lim.release(Signal(limited=True, pause_s=3.0), sent_at=0.0, now=0.0, ok=False)
    assert lim.allowed == 1
    assert lim.acquire(1.0) == 2.0
    assert lim.acquire(3.0) is None and lim.acquire(3.0) == 0.0


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"retry-after": "2"}, Signal(True, 2.0)),
        (429, {}, Signal(True, 0.0)),
        (200, {"retry-after": "5"}, Signal(False, 0.0)),
        (200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30s"}, Signal(True, 60.0)),
        (200, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "250ms"}, Signal(True, 0.25)),
        (200, {"x-ratelimit-remaining-tokens": "12"}, Signal(False, 0.0)),
    ],
)
def test_rate_limit_signals(status, headers, expected):
    assert signal_of(status, httpx2.Headers(headers)) == expected


def test_durations():
    assert duration_s("1.5") == 1.5
    assert duration_s("6m0s") == 360
    assert duration_s("1h2m3s") == 3723
    assert duration_s("soon") is None and duration_s("") is None


def test_prices_and_budgets():
    prices = PriceSettings(input=2.0, cached_input=0.5, output=8.0)
    assert prices.cost(1_000_000, 400_000, 100_000) == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)
    assert PriceSettings(input=1.0).cost(5, 0, 5) is None
    budget = BudgetSettings(run_tokens=100, sample_cost=0.01, prices=prices)
    spent = Spend()
    spent.add(Usage(input_tokens=60, output_tokens=30), prices)
    assert run_limit_reached(budget, spent) is None
    spent.add(Usage(input_tokens=10), prices)
    assert "100 tokens" in (run_limit_reached(budget, spent) or "")
    big = Spend()
    big.add(Usage(output_tokens=1250), prices)
    assert "--sample-cost" in (sample_limit_reached(budget, big) or "")


def test_a_cost_limit_without_prices_is_refused():
    with pytest.raises(ValidationError, match="needs the input and output prices"):
        RunSettings.model_validate({"model": {"name": "m"}, "budget": {"runCost": 5}})


def test_usage_of_a_completion_body():
    body = {"usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 64}}}
    assert usage_of(body) == Usage(input_tokens=100, output_tokens=7, cached_input_tokens=64)
    assert usage_of({"usage": {"prompt_tokens": "x"}}) == Usage()
    assert usage_of({}) is None and usage_of([]) is None


# --- the governor, with plain callables for the endpoint --------------------------------------

REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def answer(status: int = 200, tokens: int = 10, headers: dict | None = None) -> httpx2.Response:
    body = {"usage": {"prompt_tokens": tokens, "completion_tokens": 0}}
    return httpx2.Response(status, json=body, headers=headers or {}, request=REQUEST)


def down() -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=REQUEST)


class Time:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_budget_refuses_calls_at_the_run_and_the_sample_limit():
    lines: list[str] = []
    governor = Governor(4, BudgetSettings(run_tokens=30, sample_tokens=15), notice=lines.append)
    first, second = Meter(), Meter()
    governor.call(first, answer, lambda: True)
    governor.call(first, answer, lambda: True)
    with pytest.raises(CallRefused) as refused:
        governor.call(first, answer, lambda: True)
    assert refused.value.kind == ErrorKind.sample_budget and first.refused == ErrorKind.sample_budget
    assert classify(refused.value) == (ErrorKind.sample_budget, False)
    governor.call(second, answer, lambda: True)
    assert governor.exhausted() and len(lines) == 1 and "run budget reached" in lines[0]
    with pytest.raises(CallRefused) as refused:
        governor.call(second, answer, lambda: True)
    assert refused.value.kind == ErrorKind.budget
    assert governor.total().usage.input_tokens == 30 and first.spend.usage.input_tokens == 20


def test_an_outage_pauses_calls_until_a_probe_finds_the_endpoint():
    """Three refused connections open the breaker; a caller then waits (its call is not sent) while
    probes fail, and goes on, sent once, when one succeeds."""
    lines: list[str] = []
    clock = Time()
    governor = Governor(2, BudgetSettings(), notice=lines.append, now=clock, breaker=BreakerPolicy(failures=3, first_probe_s=0.0, max_probe_s=0.0))
    for _ in range(3):
        with pytest.raises(httpx2.ConnectError):
            governor.call(Meter(), down, lambda: True)
    assert governor.openings() == 1 and "unavailable" in lines[0]
    probes = iter([False, False, True])
    sent: list[int] = []

    def probe() -> bool:
        clock.t += 10
        return next(probes)

    def send() -> httpx2.Response:
        sent.append(1)
        return answer()

    governor.call(Meter(), send, probe)
    assert sent == [1] and "answers again after 30 s" in lines[-1]


def test_calls_beyond_the_limit_wait_for_a_slot():
    governor = Governor(1, BudgetSettings())
    inside, leave = threading.Event(), threading.Event()

    def slow() -> httpx2.Response:
        inside.set()
        leave.wait()
        return answer()

    first = threading.Thread(target=governor.call, args=(Meter(), slow, lambda: True))
    first.start()
    inside.wait()
    waiting = threading.Thread(target=governor.call, args=(Meter(), answer, lambda: True))
    waiting.start()
    assert governor.limiter.in_flight == 1
    leave.set()
    first.join()
    waiting.join()
    assert governor.peak == 1 and governor.limiter.in_flight == 0


def test_429s_cut_the_limit():
    governor = Governor(8, BudgetSettings())
    governor.call(Meter(), lambda: answer(429), lambda: True)
    assert governor.limiter.allowed == 6
    meter = Meter()
    governor.call(meter, lambda: answer(200, headers={"x-ratelimit-remaining-requests": "0"}), lambda: True)
    assert meter.rate_limited == 1  # what the attempt's result reports to the operator's window


def test_a_pod_waits_out_an_outage_only_for_its_hold_then_the_outage_ends_the_attempt():
    clock = Time()
    policy = BreakerPolicy(failures=1, first_probe_s=0.0, max_probe_s=0.0)  # probes at once: the clock moves only in them
    governor = Governor(1, BudgetSettings(), now=clock, breaker=policy, hold_s=12.0)
    with pytest.raises(httpx2.ConnectError):
        governor.call(Meter(), down, lambda: True)

    def probe() -> bool:
        clock.t += 5
        return False

    with pytest.raises(CallRefused) as refused:
        governor.call(Meter(), answer, probe)
    assert refused.value.kind == ErrorKind.connection and clock.t >= 12.0
    assert governor.ended_by_outage(ErrorKind.connection, 0) and not governor.ended_by_outage(ErrorKind.connection, 1)
    assert not governor.ended_by_outage(ErrorKind.max_steps, 0)


def streamed(*events: bytes) -> httpx2.Response:
    """A 200 event stream, cut into pieces that split lines, as a network delivers it."""
    raw = b"".join(events)
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_Pieces(pieces), request=REQUEST)


class _Pieces(httpx2.SyncByteStream):
    def __init__(self, pieces: list[bytes]):
        self.pieces = pieces

    def __iter__(self):
        yield from self.pieces


def test_a_streams_usage_chunk_counts_once_the_stream_is_read_and_passes_unchanged():
    governor = Governor(2, BudgetSettings(run_tokens=100))
    meter = Meter()
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 90, "completion_tokens": 20}}\r\n\r\n'
    events = (b'data: {"choices": [{"delta": {"content": "hi"}}], "usage": null}\n\n', usage, b"data: [DONE]\n\n")
    response = governor.call(meter, lambda: streamed(*events), lambda: True)
    assert meter.spend.usage.total == 0  # nothing read yet
    assert response.read() == b"".join(events)
    assert meter.spend.usage == Usage(input_tokens=90, output_tokens=20) and governor.exhausted()

"""Every model call of a run passes here: the budget, the outage breaker and the rate limiter.

It sits under the openai client as an HTTP transport, so the agent loop is unchanged: a call over
budget is refused with `CallRefused` (which the loop records as the sample's ending), a call during
an outage waits (the sample keeps its attempt) while one caller at a time probes the endpoint, and
calls beyond the adaptive limit wait for a slot. The decisions are the pure machines in `breaker`,
`limiter` and `budget`; this module adds the lock, the waiting and the lines a person reads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx2
import openai

from gdpval.agent.breaker import Admission, Breaker, BreakerPolicy
from gdpval.agent.limiter import Limiter, Signal, signal_of
from gdpval.budget import Spend, run_limit_reached, sample_limit_reached, usage_of
from gdpval.sample import OUTAGE_KINDS, ErrorKind, Usage
from gdpval.settings import BudgetSettings

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 10.0
CHAT_PATH = "/chat/completions"


class CallRefused(openai.OpenAIError):
    """A model call the budget does not allow; the openai client passes it up unchanged."""

    def __init__(self, kind: ErrorKind, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Meter:
    """One sample attempt's spend, and the budget that ended it, if one did."""

    spend: Spend = field(default_factory=Spend)
    refused: ErrorKind | None = None
    rate_limited: int = 0  # calls answered with a rate limit (429, or x-ratelimit-remaining-* at 0)


class Governor:
    """Thread-safe: the run's samples share one. `notice` prints a line for a person."""

    def __init__(
        self,
        parallelism: int,
        budget: BudgetSettings,
        spent: Spend | None = None,
        notice: Callable[[str], None] = lambda line: log.warning("%s", line),
        now: Callable[[], float] = time.monotonic,
        breaker: BreakerPolicy | None = None,
        hold_s: float | None = None,
    ):
        self.budget = budget
        self.spent = spent or Spend()
        self.notice = notice
        self.now = now
        self.breaker = Breaker(breaker or BreakerPolicy())
        self.limiter = Limiter(parallelism)
        self.cond = threading.Condition()
        self.budget_told = False
        self.peak = 0
        self.hold_s = hold_s  # a call waits this long for an outage to end, then fails (None: for ever)

    # --- for the runner -----------------------------------------------------------------------

    def exhausted(self) -> str | None:
        """Why the run budget allows no more calls, or None."""
        with self.cond:
            return run_limit_reached(self.budget, self.spent)

    def openings(self) -> int:
        with self.cond:
            return self.breaker.openings

    def wait_available(self, stopping: Callable[[], bool]) -> None:
        """Return once the endpoint is not known to be down (or the run stops): no sample starts in an outage."""
        with self.cond:
            while self.breaker.open and not stopping():
                self.cond.wait(timeout=1.0)

    def ended_by_outage(self, kind: ErrorKind | None, openings: int) -> bool:
        """An attempt that ended with `kind`, begun when the breaker had opened `openings` times, was
        ended by an outage, not by the model: it runs again under the same attempt number."""
        return kind in OUTAGE_KINDS and self.openings() != openings

    def total(self) -> Spend:
        with self.cond:
            return Spend(self.spent.usage, self.spent.cost)

    # --- for the transport --------------------------------------------------------------------

    def call(self, meter: Meter, send: Callable[[], httpx2.Response], probe: Callable[[], bool]) -> httpx2.Response:
        """One model call under the budget, the breaker and the limiter."""
        self._check_budget(meter)
        self._through_breaker(probe)
        sent_at = self._acquire()
        try:
            response = send()
        except httpx2.TransportError as exc:
            self._ended(meter, sent_at, None, None, outage=str(exc) or type(exc).__name__)
            raise
        except BaseException:
            self._ended(meter, sent_at, None, None, outage=None)
            raise
        usage = None
        kind = response.headers.get("content-type", "") if response.status_code == 200 else ""
        if "json" in kind:
            response.read()
            usage = _usage(response.content)
        elif "event-stream" in kind and "content-encoding" not in response.headers and isinstance(response.stream, httpx2.SyncByteStream):
            response.stream = UsageTap(response.stream, lambda found: self._count(meter, found))
        outage = f"HTTP {response.status_code}" if response.status_code >= 500 else None
        self._ended(meter, sent_at, response, usage, outage)
        return response

    def _check_budget(self, meter: Meter) -> None:
        with self.cond:
            reason = run_limit_reached(self.budget, self.spent)
            kind = ErrorKind.budget
            if reason is None:
                reason, kind = sample_limit_reached(self.budget, meter.spend), ErrorKind.sample_budget
            if reason is None:
                return
            meter.refused = kind
        raise CallRefused(kind, reason)

    def _through_breaker(self, probe: Callable[[], bool]) -> None:
        while True:
            with self.cond:
                while self._held_too_long() or (admission := self.breaker.admit(self.now())) == Admission.wait:
                    self.cond.wait(timeout=self.breaker.wait_s(self.now()))
                if admission == Admission.go:
                    return
            ok = probe()
            with self.cond:
                opened_at = self.breaker.opened_at
                if self.breaker.probed(ok, self.now()) and opened_at is not None:
                    self.notice(f"model endpoint answers again after {self.now() - opened_at:.0f} s: the run resumes")
                else:
                    log.info("model endpoint still unavailable; next probe in %.0f s", self.breaker.probe_delay)
                self.cond.notify_all()

    def _held_too_long(self) -> bool:
        """False, or raises once the endpoint has been down longer than `hold_s` (asked before any admission)."""
        opened_at = self.breaker.opened_at
        if self.hold_s is None or opened_at is None or self.now() - opened_at < self.hold_s:
            return False
        raise CallRefused(ErrorKind.connection, f"the model endpoint has been unavailable for {self.now() - opened_at:.0f} s")

    def _acquire(self) -> float:
        with self.cond:
            while (wait := self.limiter.acquire(self.now())) is not None:
                self.cond.wait(timeout=wait or None)
            self.peak = max(self.peak, self.limiter.in_flight)
            return self.now()

    def _ended(self, meter: Meter, sent_at: float, response: httpx2.Response | None, usage: Usage | None, outage: str | None) -> None:
        with self.cond:
            now = self.now()
            if outage is not None and self.breaker.failed(now):
                self.notice(
                    f"model endpoint unavailable: {self.breaker.failed_in_row} calls in a row failed (last: {outage}); "
                    f"the run pauses and probes it every {self.breaker.policy.first_probe_s:g} to {self.breaker.policy.max_probe_s:g} s"
                )
            elif response is not None and outage is None:
                self.breaker.answered()
            signal = signal_of(response.status_code, response.headers) if response is not None else Signal()
            meter.rate_limited += signal.limited
            self.limiter.release(signal, sent_at, now, ok=response is not None and response.status_code < 400)
            if usage is not None:
                self._add(meter, usage)
            self.cond.notify_all()

    def _count(self, meter: Meter, usage: Usage) -> None:
        """Usage that arrives after the call's slot was given back: a stream's last chunk."""
        with self.cond:
            self._add(meter, usage)

    def _add(self, meter: Meter, usage: Usage) -> None:
        meter.spend.add(usage, self.budget.prices)
        self.spent.add(usage, self.budget.prices)
        self._tell_budget()

    def _tell_budget(self) -> None:
        reason = run_limit_reached(self.budget, self.spent)
        if reason is None or self.budget_told:
            return
        self.budget_told = True
        self.notice(f"run budget reached: {reason}; no new sample starts and running ones end with reason budget; raise the limit and run again to go on")


def _usage(content: bytes) -> Usage | None:
    try:
        return usage_of(json.loads(content))
    except ValueError:
        return None


class UsageTap(httpx2.SyncByteStream):
    """A streamed answer passed through unchanged, its `usage` chunk (stream_options include_usage,
    the last one) counted as it goes by. Lines are read as server-sent events; a line longer than
    `MAX_LINE` is no usage chunk of a sane server and is skipped rather than held."""

    MAX_LINE = 1 << 20

    def __init__(self, inner: httpx2.SyncByteStream, found: Callable[[Usage], None]):
        self.inner = inner
        self.found = found
        self.pending = b""

    def __iter__(self) -> Iterator[bytes]:
        for part in self.inner:
            self._scan(part)
            yield part
        self._scan(b"\n")

    def _scan(self, part: bytes) -> None:
        *lines, self.pending = (self.pending + part).split(b"\n")
        if len(self.pending) > self.MAX_LINE:
            self.pending = b""
        for line in lines:
            if line.startswith(b"data:") and b'"usage"' in line and (usage := _usage(line[5:])) is not None:
                self.found(usage)

    def close(self) -> None:
        self.inner.close()


class GovernedTransport(httpx2.BaseTransport):
    """One sample's view of the run's shared connection pool, with its chat calls governed."""

    def __init__(self, inner: httpx2.BaseTransport, governor: Governor, meter: Meter):
        self.inner = inner
        self.governor = governor
        self.meter = meter

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if not request.url.path.endswith(CHAT_PATH):
            return self.inner.handle_request(request)
        return self.governor.call(self.meter, lambda: self.inner.handle_request(request), lambda: self._probe(request))

    def _probe(self, request: httpx2.Request) -> bool:
        """Any HTTP answer below 500 to a GET of the models list (a 404 included) means the endpoint is back."""
        url = request.url.copy_with(path=request.url.path.removesuffix(CHAT_PATH) + "/models")
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "api-key", "host")}
        probe = httpx2.Request("GET", url, headers=headers, extensions={"timeout": httpx2.Timeout(PROBE_TIMEOUT_S).as_dict()})
        try:
            response = self.inner.handle_request(probe)
            response.read()
            response.close()
        except Exception:  # whatever went wrong, the endpoint did not answer; the breaker must hear of it
            log.debug("probe failed", exc_info=True)
            return False
        return response.status_code < 500

    def close(self) -> None:
        """The pool is the run's: its owner closes it, not one sample's client."""

"""The run's circuit breaker on the model endpoint: a pure state machine, time passed in.

Closed, every call goes. When the endpoint fails `failures` requests in a row (no answer, a dropped
connection, a timeout, a 5xx), it opens: calls wait instead of failing, and one probe at a time asks
the endpoint whether it is back, with a delay that doubles up to `max_probe_s`. Any HTTP answer below
500 (a 429 or a 404 included) means the endpoint is there: the breaker closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Admission(StrEnum):
    go = "go"  # send the call
    probe = "probe"  # the caller probes the endpoint, then reports with `probed`
    wait = "wait"  # wait (at most `Breaker.wait_s`) and ask again


@dataclass(frozen=True)
class BreakerPolicy:
    failures: int = 5
    first_probe_s: float = 1.0
    max_probe_s: float = 30.0


@dataclass
class Breaker:
    policy: BreakerPolicy = BreakerPolicy()
    failed_in_row: int = 0
    opened_at: float | None = None
    next_probe_at: float = 0.0
    probe_delay: float = 0.0
    probing: bool = False
    openings: int = 0  # how many times it opened: an attempt that saw this change met an outage

    @property
    def open(self) -> bool:
        return self.opened_at is not None

    def answered(self) -> bool:
        """The endpoint answered a call; True when that closed the breaker."""
        self.failed_in_row = 0
        return self._close()

    def failed(self, now: float) -> bool:
        """A call got no usable answer (outage-like); True when that opened the breaker."""
        self.failed_in_row += 1
        if self.open or self.failed_in_row < self.policy.failures:
            return False
        self.opened_at = now
        self.openings += 1
        self.probe_delay = self.policy.first_probe_s
        self.next_probe_at = now + self.probe_delay
        return True

    def admit(self, now: float) -> Admission:
        """What a caller does now; a `probe` is handed to one caller at a time."""
        if not self.open:
            return Admission.go
        if self.probing or now < self.next_probe_at:
            return Admission.wait
        self.probing = True
        return Admission.probe

    def wait_s(self, now: float) -> float:
        """How long a waiting caller sleeps before asking again (a probe's end also wakes it)."""
        return max(0.0, self.next_probe_at - now) if not self.probing else self.policy.first_probe_s

    def probed(self, ok: bool, now: float) -> bool:
        """The probe's result; True when it closed the breaker."""
        self.probing = False
        if ok:
            return self.answered()
        self.probe_delay = min(self.policy.max_probe_s, self.probe_delay * 2)
        self.next_probe_at = now + self.probe_delay
        return False

    def _close(self) -> bool:
        if not self.open:
            return False
        self.opened_at = None
        self.probing = False
        return True

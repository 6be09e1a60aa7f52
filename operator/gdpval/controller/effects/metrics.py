"""Prometheus metrics in the text exposition format, without a client library.

Per-run gauges are replaced wholesale after each reconcile pass and dropped with the run, so a
deleted run leaves no stale series behind.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gdpval.controller.types import Tally

BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STATES = ("pending", "running", "succeeded", "failed")
# Failure reasons exported per run (the most frequent); the others are summed under "other".
MAX_REASONS = 20


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def top_reasons(reasons: dict[str, int]) -> list[tuple[str, int]]:
    """At most `MAX_REASONS` series per run, so a run with many distinct failures cannot flood Prometheus."""
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) <= MAX_REASONS:
        return [(r or "unknown", c) for r, c in ranked]
    kept = ranked[: MAX_REASONS - 1]
    return [(r or "unknown", c) for r, c in kept] + [("other", sum(c for _, c in ranked[MAX_REASONS - 1 :]))]


@dataclass
class RunGauges:
    state: str
    tally: Tally
    cost: float | None = None  # at spec.budget.prices; None without prices
    held: bool = False  # ModelUnavailable: the model endpoint's outage holds the run


@dataclass
class Counts:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        for i in range(bisect.bisect_left(BUCKETS, seconds), len(BUCKETS)):
            self.buckets[i] += 1
        self.total += seconds
        self.count += 1


@dataclass
class Histogram:
    """One histogram, or one series per value of `label`."""

    name: str
    help: str
    label: str = ""
    series: dict[str, Counts] = field(default_factory=dict)

    def observe(self, seconds: float, value: str = "") -> None:
        self.series.setdefault(value, Counts()).observe(seconds)

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for value, counts in sorted(self.series.items()) or [("", Counts())]:
            first = f'{self.label}="{_escape(value)}",' if self.label else ""
            only = f"{{{first[:-1]}}}" if self.label else ""
            bounds = [*map(str, BUCKETS), "+Inf"]
            lines += [f'{self.name}_bucket{{{first}le="{b}"}} {c}' for b, c in zip(bounds, [*counts.buckets, counts.count], strict=True)]
            lines += [f"{self.name}_sum{only} {counts.total:.6f}", f"{self.name}_count{only} {counts.count}"]
        return lines


@dataclass
class Metrics:
    runs: dict[tuple[str, str], RunGauges] = field(default_factory=dict)
    passes: Histogram = field(default_factory=lambda: Histogram("gdpval_reconcile_duration_seconds", "Time of one reconcile pass, from taking a pass slot."))
    waits: Histogram = field(default_factory=lambda: Histogram("gdpval_reconcile_wait_seconds", "Time a run's due pass waited for a pass slot."))
    phases: Histogram = field(default_factory=lambda: Histogram("gdpval_reconcile_phase_seconds", "Time of each step of a reconcile pass.", "phase"))
    errors: int = 0

    def observe_run(self, namespace: str, name: str, state: str, tally: Tally, cost: float | None = None, held: bool = False) -> None:
        """A finished run is observed from its status, which has no failure reasons: the last known stay."""
        old = self.runs.get((namespace, name))
        if old is not None and not tally.failure_reasons and old.tally.failure_reasons:
            tally = tally.model_copy(update={"failure_reasons": old.tally.failure_reasons})
        self.runs[(namespace, name)] = RunGauges(state, tally, cost, held)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Times one step of a pass (gather, decide, ledger, apply, status, events), so a slow pass says where."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.phases.observe(time.monotonic() - started, name)

    def forget_run(self, namespace: str, name: str) -> None:
        self.runs.pop((namespace, name), None)

    def observe_reconcile(self, seconds: float, failed: bool = False, waited: float = 0.0) -> None:
        """A pass's own time, apart from its wait for a slot (with many runs, mostly the other runs' passes)."""
        self.passes.observe(seconds)
        self.waits.observe(waited)
        self.errors += int(failed)

    def render(self) -> str:
        lines = [
            "# HELP gdpval_samples Samples of a run by state.",
            "# TYPE gdpval_samples gauge",
        ]
        for (ns, name), run in sorted(self.runs.items()):
            for state in STATES:
                lines.append(f"gdpval_samples{_labels(namespace=ns, run=name, state=state)} {getattr(run.tally, state)}")
        lines += ["# HELP gdpval_samples_retried Sample pods started again after a failed or lost attempt.", "# TYPE gdpval_samples_retried gauge"]
        lines += [f"gdpval_samples_retried{_labels(namespace=ns, run=name)} {r.tally.retried}" for (ns, name), r in sorted(self.runs.items())]
        lines += ["# HELP gdpval_tokens Model tokens used by committed attempts.", "# TYPE gdpval_tokens gauge"]
        for (ns, name), run in sorted(self.runs.items()):
            lines.append(f"gdpval_tokens{_labels(namespace=ns, run=name, direction='input')} {run.tally.input_tokens}")
            lines.append(f"gdpval_tokens{_labels(namespace=ns, run=name, direction='output')} {run.tally.output_tokens}")
        lines += ["# HELP gdpval_cost Money spent by the ended attempts at spec.budget.prices (runs with prices only).", "# TYPE gdpval_cost gauge"]
        lines += [f"gdpval_cost{_labels(namespace=ns, run=name)} {r.cost:.6f}" for (ns, name), r in sorted(self.runs.items()) if r.cost is not None]
        lines += ["# HELP gdpval_model_unavailable 1 while the model endpoint's outage holds the run.", "# TYPE gdpval_model_unavailable gauge"]
        lines += [f"gdpval_model_unavailable{_labels(namespace=ns, run=name)} {int(r.held)}" for (ns, name), r in sorted(self.runs.items())]
        lines += ["# HELP gdpval_model_api_errors Retried model API errors (429, 5xx, timeouts) in committed attempts.", "# TYPE gdpval_model_api_errors gauge"]
        lines += [f"gdpval_model_api_errors{_labels(namespace=ns, run=name)} {r.tally.api_errors}" for (ns, name), r in sorted(self.runs.items())]
        lines += [
            "# HELP gdpval_samples_failed_by_reason Failed samples of a run by the reason of their last attempt.",
            "# TYPE gdpval_samples_failed_by_reason gauge",
        ]
        for (ns, name), run in sorted(self.runs.items()):
            lines += [f"gdpval_samples_failed_by_reason{_labels(namespace=ns, run=name, reason=r)} {c}" for r, c in top_reasons(run.tally.failure_reasons)]
        lines += ["# HELP gdpval_run_info The state of each run.", "# TYPE gdpval_run_info gauge"]
        lines += [f"gdpval_run_info{_labels(namespace=ns, run=name, state=r.state)} 1" for (ns, name), r in sorted(self.runs.items())]
        lines += self.passes.render() + self.waits.render() + self.phases.render()
        lines += ["# HELP gdpval_reconcile_errors_total Reconcile passes that raised.", "# TYPE gdpval_reconcile_errors_total counter"]
        lines.append(f"gdpval_reconcile_errors_total {self.errors}")
        return "\n".join(lines) + "\n"

"""Live progress for `gdpval run`: a progress bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import threading
import time
from typing import Any

from pydantic import Field
from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from gdpval import sample
from gdpval.manifest import ManifestEntry
from gdpval.sample import ErrorKind, SampleResult, SampleStatus

BAR_WIDTH = 30


def eta(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m" if seconds >= 3600 else f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def figures(done: int, total: int, running: int, failed: int, input_tokens: int, output_tokens: int, eta_s: float | None) -> str:
    """The live figures in one line, the same for `gdpval run` and `gdpval status`."""
    return f"done {done}/{total}  running {running}  failed {failed}  tokens in {input_tokens:,} out {output_tokens:,}  ETA {eta(eta_s)}"


def bar(done: int, total: int, text: str) -> Table:
    """A progress bar beside the figures (for a terminal); the figures wrap, never cut, on a narrow one."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=BAR_WIDTH)
    grid.add_column(overflow="fold")
    grid.add_row(ProgressBar(total=max(total, 1), completed=done, width=BAR_WIDTH), Text(text))
    return grid


class Tally(sample.Tally):
    """Live counts of `gdpval run`: `skipped` were committed before this invocation, `crashed` will run on resume."""

    skipped: int = 0
    crashed: int = 0
    budget_cut: int = 0  # ended by the run budget: neither failed nor done, a resume goes on with them
    redone: int = 0  # attempts an endpoint outage ended, run again under the same number
    cost: float | None = None  # with prices (budget.prices): the money spent in this invocation
    started: float = Field(default_factory=time.monotonic)

    @property
    def finished(self) -> int:
        """Samples with a result: committed before this invocation or during it (crashes not counted)."""
        return self.skipped + self.succeeded + self.failed

    def eta_seconds(self) -> float | None:
        ended = self.done + self.crashed
        left = self.total - self.skipped - ended
        if ended == 0 or left <= 0:
            return None
        return (time.monotonic() - self.started) / ended * left

    def line(self) -> str:
        live = figures(self.finished, self.total, self.running, self.failed, self.input_tokens, self.output_tokens, self.eta_seconds())
        crashed = f"  crashed {self.crashed}" if self.crashed else ""
        crashed += f"  budget-cut {self.budget_cut}" if self.budget_cut else ""
        cost = f"  cost {self.cost:,.4f}" if self.cost is not None else ""
        return f"{live}{cost}{crashed}  elapsed {time.monotonic() - self.started:.0f}s"


class Progress:
    """Receives runner events from worker threads; one lock keeps the counts consistent."""

    def __init__(self, tally: Tally, console: Console):
        self.tally = tally
        self.console = console
        self.lock = threading.Lock()
        self.live = Live(self._view(), console=console, refresh_per_second=4, transient=False) if console.is_terminal else None

    def _view(self) -> Table:
        return bar(self.tally.finished, self.tally.total, self.tally.line())

    def __enter__(self) -> Progress:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.live.update(self._view())
            self.live.__exit__(*exc)

    def event(self, kind: str, entry: ManifestEntry, result: SampleResult | None) -> None:
        with self.lock:
            self._count(kind, result)
            if self.live:
                self.live.update(self._view())
            elif kind != "start":
                self.console.print(f"{entry.sample.sample_id}: {self._describe(kind, result)}  [{self.tally.line()}]", markup=False, highlight=False)

    def _count(self, kind: str, result: SampleResult | None) -> None:
        t = self.tally
        if kind == "start":
            t.running += 1
            return
        t.running -= 1
        if kind in ("crash", "redo"):
            t.crashed += kind == "crash"
            t.redone += kind == "redo"
            return
        assert result is not None
        t.input_tokens += result.usage.input_tokens
        t.output_tokens += result.usage.output_tokens
        if result.cost is not None:
            t.cost = (t.cost or 0.0) + result.cost
        if result.completed:
            t.succeeded += 1
        elif result.error_kind == ErrorKind.budget:
            t.budget_cut += 1
        else:
            t.failed += 1

    @staticmethod
    def _describe(kind: str, result: SampleResult | None) -> str:
        if kind == "redo":
            return "ended by the endpoint outage; runs again under the same attempt number"
        if kind == "crash" or result is None:
            return f"crashed ({result.error if result else 'unknown'}); will run again on resume"
        if result.status == SampleStatus.succeeded:
            return f"succeeded in {result.steps} steps"
        if result.error_kind == ErrorKind.budget:
            return f"cut by the run budget after {result.steps} steps; a resume with a higher limit goes on from here"
        return f"failed: {result.error_kind}: {result.error}"

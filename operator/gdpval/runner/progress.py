"""Live progress for `gdpval run`: a rich status line on a terminal, plain lines otherwise."""

from __future__ import annotations

import threading
import time
from typing import Any

from pydantic import Field
from rich.console import Console
from rich.live import Live
from rich.text import Text

from gdpval import sample
from gdpval.manifest import ManifestEntry
from gdpval.sample import SampleResult, SampleStatus


class Tally(sample.Tally):
    """Live counts of `gdpval run`: `skipped` were committed before this invocation, `crashed` will run on resume."""

    skipped: int = 0
    crashed: int = 0
    started: float = Field(default_factory=time.monotonic)

    def eta(self) -> str:
        finished = self.done + self.crashed
        left = self.total - self.skipped - finished
        if finished == 0 or left <= 0:
            return "-"
        seconds = (time.monotonic() - self.started) / finished * left
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"

    def line(self) -> str:
        return (
            f"done {self.succeeded + self.skipped}/{self.total}  failed {self.failed}  crashed {self.crashed}  "
            f"running {self.running}  tokens in {self.input_tokens:,} out {self.output_tokens:,}  "
            f"elapsed {time.monotonic() - self.started:.0f}s  ETA {self.eta()}"
        )


class Progress:
    """Receives runner events from worker threads; one lock keeps the counts consistent."""

    def __init__(self, tally: Tally, console: Console):
        self.tally = tally
        self.console = console
        self.lock = threading.Lock()
        self.live = Live(Text(tally.line()), console=console, refresh_per_second=4, transient=False) if console.is_terminal else None

    def __enter__(self) -> Progress:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.live.update(Text(self.tally.line()))
            self.live.__exit__(*exc)

    def event(self, kind: str, entry: ManifestEntry, result: SampleResult | None) -> None:
        with self.lock:
            self._count(kind, result)
            if self.live:
                self.live.update(Text(self.tally.line()))
            elif kind != "start":
                self.console.print(f"{entry.sample.sample_id}: {self._describe(kind, result)}  [{self.tally.line()}]", highlight=False)

    def _count(self, kind: str, result: SampleResult | None) -> None:
        t = self.tally
        if kind == "start":
            t.running += 1
            return
        t.running -= 1
        if kind == "crash":
            t.crashed += 1
            return
        assert result is not None
        t.input_tokens += result.usage.input_tokens
        t.output_tokens += result.usage.output_tokens
        if result.completed:
            t.succeeded += 1
        else:
            t.failed += 1

    @staticmethod
    def _describe(kind: str, result: SampleResult | None) -> str:
        if kind == "crash" or result is None:
            return f"crashed ({result.error if result else 'unknown'}); will run again on resume"
        if result.status == SampleStatus.succeeded:
            return f"succeeded in {result.steps} steps"
        return f"failed: {result.error_kind}: {result.error}"

"""`gdpval status`: where a run stands, from its folder (local or S3) or from a GdpvalRun's status.

The figures are those of `gdpval run`'s live line (done/total, running, failed, tokens, ETA), plus
progress per sector and the latest failures with their reasons. Built by pure functions; reading
storage or the cluster happens in `storage_status` and `cluster_status`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from gdpval.budget import run_stop_line
from gdpval.report.records import RunRecords
from gdpval.runner.progress import figures
from gdpval.sample import ErrorKind
from gdpval.submission.readiness import current_share

LATEST_FAILURES = 5


# Conditions under which a running run starts no new sample: `gdpval status` prints their message.
HOLDS = ("ModelUnavailable", "BudgetExhausted")


class SectorProgress(BaseModel):
    name: str
    total: int = 0
    done: int = 0
    failed: int = 0
    cost: float | None = None  # of the committed results, at the run's prices


class Failure(BaseModel):
    sample_id: str
    sector: str
    reason: str  # error kind
    error: str
    finished_at: float = 0.0


class RunStatus(BaseModel):
    source: str  # the run's folder, or the GdpvalRun
    run: str
    state: str = ""  # a GdpvalRun's state; a folder's is derived from its counts
    total: int = 0
    done: int = 0
    succeeded: int = 0
    failed: int = 0
    budget: int = 0  # cut by the run budget: neither done nor failed, they go on when the limit is raised
    running: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None  # of the committed results, at the run's prices (budget.prices)
    eta_s: float | None = None
    pace_s: float | None = None  # seconds of run time per finished sample, from the folder's results
    sectors: list[SectorProgress] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    grading_ready: float | None = None  # from `gdpval check`, when it checked the committed attempts
    grading_text_only: bool = False  # that check had no LibreOffice: nothing counted, no fonts checked

    @property
    def finished(self) -> bool:
        return self.state in ("Succeeded", "Failed") or (not self.state and self.total > 0 and self.done == self.total)

    def lines(self) -> list[str]:
        head = f"{self.run} ({self.source})" + (f": {self.state}" if self.state else "")
        live = figures(self.done, self.total, self.running, self.failed, self.input_tokens, self.output_tokens, self.eta_s)
        cut = f"  budget-cut {self.budget}" if self.budget else ""
        out = [head, live + cut + (f"  cost {self.cost:,.4f}" if self.cost is not None else "")]
        width = max((len(s.name) for s in self.sectors), default=0)
        out += [f"  {s.name:<{width}}  {s.done}/{s.total} done, {s.failed} failed" + _cost(s.cost) for s in self.sectors]
        if self.failures:
            out.append("latest failures:")
            out += [f"  {f.sample_id} ({f.sector}): {f.reason}: {' '.join(f.error.split())[:200]}" for f in self.failures]
        if self.grading_ready is not None:
            text_only = " (checked text only: no LibreOffice, pages not counted)" if self.grading_text_only else ""
            out.append(f"grading-ready (gdpval check): {self.grading_ready:.0%}{text_only}")
        return out + self.notes


def _cost(cost: float | None) -> str:
    return f", cost {cost:,.4f}" if cost is not None else ""


def from_records(records: RunRecords, source: str, now: float) -> RunStatus:
    """A run's status from its folder: committed results are done, newer attempt folders are running."""
    sectors: dict[str, SectorProgress] = {}
    status = RunStatus(source=source, run=records.record.run_name, total=len(records.entries))
    failures = []
    for entry in records.entries:
        sample, sector = entry.sample.sample_id, entry.task.sector
        progress = sectors.setdefault(sector, SectorProgress(name=sector))
        progress.total += 1
        status.running += sample in records.started
        result = records.results.get(sample)
        if result is None:
            continue
        status.input_tokens += result.usage.input_tokens
        status.output_tokens += result.usage.output_tokens
        if result.cost is not None:
            status.cost = (status.cost or 0.0) + result.cost
            progress.cost = (progress.cost or 0.0) + result.cost
        if result.error_kind == ErrorKind.budget:
            status.budget += 1
            continue
        progress.done += 1
        status.done += 1
        if result.completed:
            status.succeeded += 1
        else:
            status.failed += 1
            progress.failed += 1
            failures.append(
                Failure(sample_id=sample, sector=sector, reason=str(result.error_kind or "unknown"), error=result.error, finished_at=result.finished_at)
            )
    status.sectors = sorted(sectors.values(), key=lambda s: s.name)
    status.failures = sorted(failures, key=lambda f: -f.finished_at)[:LATEST_FAILURES]
    status.pace_s = _pace(records, status.done, now)
    stopped = run_stop_line(records.record.settings.budget, records.spent) if not status.running else None
    status.state = f"stopped: {stopped}" if stopped and status.done < status.total else ""
    status.eta_s = None if status.state else eta(status.pace_s, status.total - status.done)
    status.grading_ready = current_share(records.check, {e.sample.sample_id: records.attempts.get(e.sample.sample_id) for e in records.entries})
    status.grading_text_only = status.grading_ready is not None and records.check is not None and records.check.text_only
    return status


def _pace(records: RunRecords, done: int, now: float) -> float | None:
    """Run time per finished sample so far (from the first start to now)."""
    starts = [r.started_at for r in records.results.values() if r.started_at > 0]
    return max(0.0, now - min(starts)) / done if starts and done else None


def eta(pace: float | None, left: int) -> float | None:
    """Time left at that pace; none before the first sample finished or after the last."""
    return pace * left if pace is not None and left > 0 else None


def from_cluster(obj: dict[str, Any], folder: RunStatus | None) -> RunStatus:
    """A GdpvalRun's status (counts, tokens, sectors), with the latest failures read from its folder when reachable."""
    meta, st = obj.get("metadata", {}), obj.get("status") or {}
    counts, tokens = st.get("samples") or {}, st.get("tokens") or {}
    total = int(counts.get("total", 0))
    succeeded, failed = int(counts.get("succeeded", 0)), int(counts.get("failed", 0))
    sectors = [
        SectorProgress(name=name, total=int(c.get("total", 0)), done=int(c.get("succeeded", 0)) + int(c.get("failed", 0)), failed=int(c.get("failed", 0)))
        for name, c in sorted((st.get("sectors") or {}).items())
    ]
    status = RunStatus(
        source=f"GdpvalRun {meta.get('namespace', '')}/{meta.get('name', '')}",
        run=str(meta.get("name", "")),
        state=str(st.get("state") or "Pending"),
        total=total,
        done=succeeded + failed,
        succeeded=succeeded,
        failed=failed,
        running=int(counts.get("running", 0)),
        input_tokens=int(tokens.get("input", 0)),
        output_tokens=int(tokens.get("output", 0)),
        cost=tokens.get("cost"),
        sectors=sectors or (folder.sectors if folder else []),
        failures=folder.failures if folder else [],
        eta_s=eta(folder.pace_s, total - succeeded - failed) if folder else None,  # the folder's pace, the status's counts
    )
    uris = [f"{label} {st[key]}" for label, key in (("storage", "storageURI"), ("submission", "submissionURI"), ("report", "reportURI")) if st.get(key)]
    unread = folder is None and status.state not in ("Pending", "Preparing") and bool(st.get("storageURI"))
    held = [f"{c['type']}: {c.get('message', '')}" for c in st.get("conditions") or [] if c.get("type") in HOLDS and c.get("status") == "True"]
    status.notes = held + uris + ["(latest failures: the run's folder is not readable from here; give --s3-endpoint and AWS credentials)"] * unread
    return status

"""The run report: figures built from a run's records by pure functions, rendered to one HTML file beside the run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from gdpval.report.model import Comparison, Prices, Report, build_report, compare
from gdpval.report.records import ReportError, RunRecords, load_records
from gdpval.report.render import render, text_copies
from gdpval.storage import Storage, layout

__all__ = ["Comparison", "Prices", "Report", "ReportError", "RunRecords", "build_report", "compare", "load_records", "render", "write_report"]


def write_report(storage: Storage, run: str, others: Sequence[str] = (), prices: Prices | None = None) -> str:
    """Write runs/<run>/report.html (compared with `others` from the same storage), with the text copies of the
    deliverables it must not link as themselves, and return its URI."""
    records = load_records(storage, run)
    report = build_report(records, prices)
    comparisons = [compare(report, build_report(load_records(storage, other, transcripts=False), prices)) for other in others]
    page = render(report, records.transcripts, comparisons, datetime.now(UTC).isoformat(timespec="seconds"))
    for deliverable, copy in text_copies(report):
        storage.put_bytes(copy, storage.get_bytes(deliverable))
    storage.put_bytes(layout.report(run), page.encode())
    return storage.url(layout.report(run))

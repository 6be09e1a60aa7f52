"""The run report: figures built from a run's records by pure functions, rendered to one HTML file beside the run."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from gdpval.report.model import Comparison, Prices, Report, build_report, compare
from gdpval.report.records import ReportError, RunRecords, load_records
from gdpval.report.render import render, text_copies
from gdpval.storage import Storage, layout

__all__ = ["Comparison", "Prices", "Report", "ReportError", "RunRecords", "build_report", "compare", "load_records", "render", "write_report"]


TEXT_COPY_BYTES = 1024 * 1024  # a text copy shows the head of the file: the whole one is in the attempt's folder


def text_preview(storage: Storage, key: str) -> bytes:
    """The first `TEXT_COPY_BYTES` of a deliverable, saying how much more there is: a report must not
    double a run's storage with copies of large binaries (fetched to a temporary file, never whole in memory)."""
    with tempfile.TemporaryDirectory(prefix="gdpval-report-") as tmp:
        local = Path(tmp) / "file"
        storage.get_file(key, local)
        size = local.stat().st_size
        with local.open("rb") as f:
            head = f.read(TEXT_COPY_BYTES)
    if size <= TEXT_COPY_BYTES:
        return head
    return head + f"\n[... {size - TEXT_COPY_BYTES} more bytes: the whole file is the deliverable itself]\n".encode()


def write_report(storage: Storage, run: str, others: Sequence[str] = (), prices: Prices | None = None) -> str:
    """Write runs/<run>/report.html (compared with `others` from the same storage), with the text copies of the
    deliverables it must not link as themselves, and return its URI."""
    records = load_records(storage, run)
    report = build_report(records, prices)
    comparisons = [compare(report, build_report(load_records(storage, other, transcripts=False), prices)) for other in others]
    page = render(report, records.transcripts, comparisons, datetime.now(UTC).isoformat(timespec="seconds"))
    for deliverable, copy in text_copies(report):
        storage.put_bytes(copy, text_preview(storage, deliverable))
    storage.put_bytes(layout.report(run), page.encode())
    return storage.url(layout.report(run))

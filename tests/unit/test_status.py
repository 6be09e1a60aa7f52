"""`gdpval status` and `gdpval run`'s live figures: a run's folder, a GdpvalRun's status object, the bar."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gdpval.report.cli import storage_status, watch
from gdpval.report.records import load_records
from gdpval.report.status import Failure, RunStatus, from_cluster, from_records
from gdpval.runner.progress import Progress, Tally
from gdpval.sample import ErrorKind
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import runs


def folder(tmp_path) -> LocalStorage:
    """t1 completed, t2 failed (deadline), t3 running (an attempt without result.json), t4 not started."""
    storage = LocalStorage(tmp_path)
    tasks = [runs.task(t, sector="Finance" if t < "t3" else "Health") for t in ("t1", "t2", "t3", "t4")]
    items = runs.entries(tasks)
    runs.write_run(storage, "r", items)
    runs.commit(storage, "r", items[0], 1, runs.succeeded(items[0], 1, {}))
    failed = runs.failed(items[1], 2, ErrorKind.deadline).model_copy(update={"started_at": 11.0, "finished_at": 14.0, "error": "the deadline\npassed"})
    runs.commit(storage, "r", items[1], 1, None)
    runs.commit(storage, "r", items[1], 2, failed)
    runs.commit(storage, "r", items[2], 1, None)
    return storage


def test_folder_status(tmp_path):
    status = from_records(load_records(folder(tmp_path), "r", transcripts=False), "here", now=30.0)
    assert (status.total, status.done, status.succeeded, status.failed, status.running) == (4, 2, 1, 1, 1)
    assert (status.input_tokens, status.output_tokens) == (100, 20)
    assert status.eta_s == (30.0 - 10.0) / 2 * 2  # two done in 20 s since the first start, two left
    assert [(s.name, s.total, s.done, s.failed) for s in status.sectors] == [("Finance", 2, 2, 1), ("Health", 2, 0, 0)]
    assert [(f.sample_id, f.reason) for f in status.failures] == [("t2-r0", "deadline")]
    lines = status.lines()
    assert lines[1] == "done 2/4  running 1  failed 1  tokens in 100 out 20  ETA 0m20s"
    assert "  t2-r0 (Finance): deadline: the deadline passed" in lines and not status.finished


def test_watch_prints_plain_lines_until_the_run_has_finished(tmp_path):
    storage = folder(tmp_path)
    out = io.StringIO()
    reads = []

    def read():
        """Each refresh finds one more sample committed, as a running run would."""
        status = storage_status(storage, "r")
        reads.append(status.done)
        items = runs.entries([runs.task("t3", sector="Health"), runs.task("t4", sector="Health")])
        pending = [e for e in items if not storage.exists(layout.result("r", e.sample.sample_id, 1))]
        if pending:
            runs.commit(storage, "r", pending[0], 1, runs.succeeded(pending[0], 1, {}))
        return status

    final = watch(read, 0.01, Console(file=out, width=200), once=False)
    assert reads == [2, 3, 4] and final.finished
    assert out.getvalue().count("done ") == 3 and "done 4/4  running 0" in out.getvalue()


def test_cluster_status_object():
    obj = {
        "metadata": {"name": "demo", "namespace": "gdpval"},
        "status": {
            "state": "Running",
            "samples": {"total": 12, "pending": 3, "running": 4, "succeeded": 4, "failed": 1},
            "tokens": {"input": 1000, "output": 200},
            "sectors": {"Health": {"total": 5, "succeeded": 2, "failed": 1}, "Finance": {"total": 7, "succeeded": 2}},
            "storageURI": "s3://b/p/runs/gdpval.demo-1234abcd",
        },
    }
    status = from_cluster(obj, None)
    assert (status.state, status.total, status.done, status.running, status.failed, status.input_tokens) == ("Running", 12, 5, 4, 1, 1000)
    assert [(s.name, s.total, s.done, s.failed) for s in status.sectors] == [("Finance", 7, 2, 0), ("Health", 5, 3, 1)]
    assert "storage s3://b/p/runs/gdpval.demo-1234abcd" in status.lines() and not status.finished
    assert from_cluster({**obj, "status": {**obj["status"], "state": "Succeeded"}}, None).finished
    failure = Failure(sample_id="x-r0", sector="Health", reason="deadline", error="late")
    folder = RunStatus(source="s3://b/p/runs/gdpval.demo-1234abcd", run="gdpval.demo-1234abcd", done=7, pace_s=10.0, failures=[failure])
    read = from_cluster(obj, folder)
    assert (read.done, read.eta_s, read.failures) == (5, 70.0, [failure])  # the status's counts at the folder's pace
    assert not [line for line in read.lines() if "not readable" in line]


def test_cluster_status_shows_the_spend_and_an_outage_hold():
    held = {"type": "ModelUnavailable", "status": "True", "message": "the model endpoint is unavailable: 3 attempt(s) held"}
    obj = {
        "metadata": {"name": "demo", "namespace": "gdpval"},
        "status": {"state": "Running", "samples": {"total": 4}, "tokens": {"input": 10, "output": 2, "cost": 0.25}, "conditions": [held]},
    }
    lines = from_cluster(obj, None).lines()
    assert "cost 0.2500" in lines[1]
    assert "ModelUnavailable: the model endpoint is unavailable: 3 attempt(s) held" in lines
    held["status"] = "False"
    assert not [line for line in from_cluster(obj, None).lines() if "ModelUnavailable" in line]


def test_run_progress_bar_on_a_terminal_and_lines_otherwise(tmp_path):
    items = runs.entries([runs.task("t1"), runs.task("t2")])
    done = runs.failed(items[0], 1).model_copy(update={"error": "[bold]not markup[/bold]"})
    for terminal in (True, False):
        out = io.StringIO()
        with Progress(Tally(total=3, skipped=1), Console(file=out, force_terminal=terminal, width=70, soft_wrap=True)) as progress:
            progress.event("start", items[0], None)
            progress.event("done", items[0], done)
        text = out.getvalue()
        words = " ".join(re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", text).split())
        assert "done 2/3 running 0 failed 1 tokens in 0 out 0 ETA" in words  # on a narrow terminal: wrapped, never cut
        assert ("━" in text) == terminal  # the bar is drawn on a terminal only
        assert terminal or "t1-r0: failed: max_steps: [bold]not markup[/bold]" in text

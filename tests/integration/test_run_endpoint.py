"""`gdpval run` against an endpoint that costs money, goes away and limits concurrency: the real CLI,
the scripted model over HTTP with its endpoint-wide faults (an outage window, 429 above N calls at
once), storage read back as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from gdpval.fakemodel.server import start_background
from support.cli import gdpval, run_args


def results(root: Path, run: str = "t") -> list[dict]:
    return pq.read_table(root / f"runs/{run}/results.parquet").to_pylist()


def committed(root: Path, run: str = "t") -> list[dict]:
    """Every committed attempt of the run, superseded ones included."""
    return [json.loads(p.read_text()) for p in sorted((root / f"runs/{run}/samples").glob("*/attempt-*/result.json"))]


def test_run_budget_stops_the_run_within_one_sample_and_a_higher_limit_resumes_it(standin_dataset, scripted_model, tmp_path):
    prices = ("--price-input", "2", "--price-cached-input", "1", "--price-output", "8")
    first = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--run-tokens", "15000", *prices))
    assert first.returncode == 3, first.stderr  # unfinished: the same command, with a higher limit, goes on
    assert "run budget reached" in first.stderr and "run the same command with a higher limit" in first.stderr, first.stderr
    spent = committed(tmp_path)
    biggest = max(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in spent)
    total = sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in spent)
    assert 15000 <= total <= 15000 + biggest  # stopped within one sample's spend of the limit
    rows = results(tmp_path)
    assert {r["status"] for r in rows} >= {"missing"}  # samples left for the resume
    cut = [r for r in rows if r["error_kind"] == "budget"]
    assert all(r["status"] == "failed" for r in cut)
    for r in rows:
        if r["status"] != "missing":
            assert r["cost"] == round((r["input_tokens"] * 2 + r["output_tokens"] * 8) / 1e6, 6)

    again = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--run-tokens", "1000000"))
    assert again.returncode == 0, again.stderr
    rows = results(tmp_path)
    assert {r["status"] for r in rows} == {"succeeded"} and len(rows) == 12
    assert all(r["cost"] is not None for r in rows)  # the stored prices stand when not given again
    report = (tmp_path / "runs/t/report.html").read_text()
    assert "cost" in report


def tokens(rows: list[dict]) -> int:
    return sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in rows)


def test_a_budget_cut_sample_goes_on_from_its_conversation_and_workspace(standin_dataset, scripted_model, tmp_path):
    """Resumed with a raised budget, the run spends what an uncut run spends, within one call per sample
    in flight: no cut sample starts again from scratch, and its workspace files are back."""
    whole = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    uncut = tokens(committed(tmp_path / "whole"))
    first = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--run-tokens", "15000"))
    assert first.returncode == 3, first.stderr
    cut = [r for r in committed(tmp_path) if r["error_kind"] == "budget"]
    assert cut, "the budget cut no sample in flight: nothing to resume"
    assert all("run budget" in r["error"] and "model API" not in r["error"] and r["api_errors"] == 0 for r in cut), cut
    status = gdpval("status", "--output", str(tmp_path), "--run-name", "t")
    first_tokens = tokens(committed(tmp_path))
    assert f"stopped: run budget ({first_tokens:,} tokens of 15,000)" in status.stdout, status.stdout
    assert f"budget-cut {len(cut)}" in status.stdout and "ETA -" in status.stdout, status.stdout
    failed = sum(1 for r in committed(tmp_path) if r["status"] == "failed" and r["error_kind"] != "budget")
    assert f"failed {failed} " in status.stdout, status.stdout
    again = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--run-tokens", "1000000"))
    assert again.returncode == 0, again.stderr
    rows = committed(tmp_path)
    continued = {(r["sample_id"], r["continues"]) for r in rows if r.get("continues")}
    spent = tokens([r for r in rows if (r["sample_id"], r["attempt"]) not in continued])  # a cut attempt's spend is in its continuation's
    assert continued == {(r["sample_id"], r["attempt"]) for r in cut}
    biggest_call = max(tokens([r]) / max(r["steps"], 1) for r in committed(tmp_path / "whole"))
    print(f"uncut {uncut}, stopped and resumed {spent}, cut {len(cut)}, one call up to {biggest_call:.0f}")
    assert spent <= uncut + 4 * biggest_call
    for r in cut:
        resumed = tmp_path / f"runs/t/samples/{r['sample_id']}/attempt-{r['attempt'] + 1}"
        events = [json.loads(line)["event"] for line in (resumed / "transcript.jsonl").read_text().splitlines()]
        assert "resume" in events
        assert {p.name for p in (resumed / "deliverable_files").iterdir()} >= set(r["deliverable_files"])


def test_a_streamed_run_counts_the_usage_of_its_last_chunk_against_the_budget(standin_dataset, tmp_path):
    with start_background(dialects=("stream-only",)) as model:
        first = gdpval(*run_args(standin_dataset, model.base_url, tmp_path, "--stream", "--run-tokens", "15000"))
    assert "run budget reached" in first.stderr, first.stderr
    spent = committed(tmp_path)
    biggest = max(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in spent)
    assert 15000 <= sum(r["usage"]["input_tokens"] + r["usage"]["output_tokens"] for r in spent) <= 15000 + biggest


def test_sample_budget_ends_only_that_sample(standin_dataset, scripted_model, tmp_path):
    done = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path, "--sample-tokens", "1500"))
    rows = results(tmp_path)
    ended = [r for r in rows if r["error_kind"] == "sample_budget"]
    assert ended and all(r["status"] == "failed" for r in ended), done.stderr
    assert not [r for r in rows if r["status"] == "missing"]


def test_an_outage_in_the_middle_of_50_samples_loses_nothing_and_spends_no_attempt(standin_dataset, tmp_path):
    """The endpoint answers 503 to everything for 8 s after its 60th chat request (scaled down from
    ten minutes; bench/endpoint.py runs the real-time one): the run pauses, probes, resumes by itself."""
    with start_background(outage_after=60, outage_seconds=8.0, latency=0.05) as model:
        done = gdpval(*run_args(standin_dataset, model.base_url, tmp_path, "--limit", "10", "--repeats", "5", "--parallelism", "6"), timeout=900)
        outage_replies = model.stats()["statuses"].get(503, 0)
    assert done.returncode == 0, done.stderr
    assert outage_replies >= 5  # the outage happened while samples were calling
    assert "model endpoint unavailable" in done.stderr and "answers again" in done.stderr
    rows = results(tmp_path)
    assert len(rows) == 50 and {r["status"] for r in rows} == {"succeeded"}
    assert {r["attempt"] for r in rows} == {1}
    assert len(committed(tmp_path)) == 50  # no attempt was committed for the outage


def test_429s_above_n_calls_at_once_bring_concurrency_down_and_every_sample_through(standin_dataset, tmp_path):
    with start_background(max_concurrent=2, latency=0.2, retry_after=0.2) as model:
        done = gdpval(*run_args(standin_dataset, model.base_url, tmp_path, "--parallelism", "8"), timeout=900)
        stats = model.stats()
    assert done.returncode == 0, done.stderr
    rows = results(tmp_path)
    assert {r["status"] for r in rows} == {"succeeded"} and len(rows) == 12
    rejected = stats["faults"].get("concurrency", 0)
    assert rejected < stats["completions"]  # the limiter stopped the storm: most calls got through first time

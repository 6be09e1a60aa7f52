"""Dialects of real OpenAI-compatible servers, played by `gdpval fake-model` and met by a real
`gdpval run` (the real openai client over HTTP, the agent loop, sandboxes, storage); replies cut off
by the token limit; and the exit status a CI pipeline reads."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pyarrow.parquet as pq
import pytest

from gdpval.fakemodel.server import start_background
from support.cli import gdpval, run_args

TASK = "83d10b06-26d1-4636-a32c-23f92c57f30b"


def run_one(dataset: Path, base_url: str, out: Path, *extra: str):
    """`gdpval run` of one task; (exit status, its results row, its transcript's events)."""
    done = gdpval(*run_args(dataset, base_url, str(out), "--task-id", TASK, *extra))
    rows = pq.read_table(out / "runs/t/results.parquet").to_pylist() if (out / "runs/t/results.parquet").exists() else []
    transcript = next((out / "runs/t/samples").rglob("transcript.jsonl"), None) if (out / "runs/t/samples").exists() else None
    events = [json.loads(line) for line in transcript.read_text().splitlines()] if transcript else []
    return done, rows, events


def of_kind(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def speak(*dialects: str) -> list[str]:
    return ["--extra-body", json.dumps({"fake_dialects": list(dialects)})]


def check_parallel(row, events):
    outputs = [e["content"] for e in of_kind(events, "tool_result")]
    assert any("FAKEMODEL-PROBE-" in o for o in outputs)  # the probes ran, and the model accepted their answers
    assert max(len(e["tool_calls"]) for e in of_kind(events, "response")) == 2


def check_reasoning(row, events):
    assert all(e["reasoning"]["reasoning_content"].startswith("Thinking about") for e in of_kind(events, "response"))


def check_no_usage(row, events):
    assert (row["input_tokens"], row["unmetered_turns"]) == (0, row["steps"])


def check_partial_usage(row, events):
    assert row["input_tokens"] > 0 and row["output_tokens"] == 0 and row["unmetered_turns"] == row["steps"]


def check_no_ids(row, events):
    calls = [c for e in of_kind(events, "response") for c in e["tool_calls"]]
    assert calls and all(c["given_id"] is None and c["id"].startswith("call_gdpval_") for c in calls)


def check_effort(row, events):
    assert all(e["usage"]["completion_tokens_details"]["reasoning_tokens"] == 256 for e in of_kind(events, "response"))


@pytest.mark.parametrize(
    "dialect, settings, check",
    [
        ("parallel", [], check_parallel),
        ("parts", [], None),
        ("reasoning", [], check_reasoning),
        ("no-usage", [], check_no_usage),
        ("partial-usage", [], check_partial_usage),
        ("no-ids", [], check_no_ids),
        ("max-completion-tokens", ["--token-limit-param", "max_completion_tokens", "--max-tokens", "4000", "--reasoning-effort", "high"], check_effort),
        ("stream-only", ["--stream"], None),
    ],
)
def test_each_dialect_runs_a_sample_to_success(dialect, settings, check, standin_dataset, scripted_model, tmp_path):
    done, [row], events = run_one(standin_dataset, scripted_model.base_url, tmp_path, *speak(dialect), *settings)
    assert done.returncode == 0, done.stderr
    assert (row["status"], row["finish_reason"]) == ("succeeded", "stop"), row
    assert row["deliverable_count"] == 1 and row["submission_ready"]
    if check:
        check(row, events)


@pytest.mark.parametrize(
    "dialect, fix",
    [("max-completion-tokens", ["--max-tokens", "4000"]), ("stream-only", [])],
)
def test_a_dialect_without_its_setting_fails_the_sample_with_the_servers_reason(dialect, fix, standin_dataset, scripted_model, tmp_path):
    done, [row], _ = run_one(standin_dataset, scripted_model.base_url, tmp_path, *speak(dialect), *fix)
    assert done.returncode == 1, done.stderr
    assert (row["status"], row["error_kind"]) == ("failed", "bad_request")
    assert ("max_completion_tokens" if dialect != "stream-only" else "stream=true") in row["error"]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("all 1 failed: bad_request: model API: Error code: 400") and row["error"].splitlines()[0][:300] in last, last


def test_the_real_client_streams_the_fake_models_chunks(scripted_model):
    client = openai.OpenAI(base_url=scripted_model.base_url, api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Say what you see.\n\n---\nWorking directory: /w\nDeliverables folder: /w/d\nReference files: none"}]
    with client.chat.completions.create(model="scripted", messages=messages, stream=True, stream_options={"include_usage": True}, max_tokens=10) as stream:
        chunks = list(stream)
    arguments = "".join(t.function.arguments or "" for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or [])
    assert len(arguments) == 40 and chunks[-2].choices[0].finish_reason == "length" and chunks[-1].usage.prompt_tokens > 0


def test_a_token_limit_too_small_ends_samples_as_truncated_never_succeeded(standin_dataset, scripted_model, tmp_path):
    """The issue's case: with a small --max-tokens every reply is cut; no sample may pass as done."""
    done = gdpval(*run_args(standin_dataset, scripted_model.base_url, str(tmp_path), "--limit", "3", "--max-tokens", "30"))
    assert done.returncode == 1, done.stderr
    rows = pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()
    assert [(r["status"], r["error_kind"], r["finish_reason"], r["completed"]) for r in rows] == [("failed", "truncated", "length", False)] * 3
    transcript = next((tmp_path / "runs/t/samples").rglob("transcript.jsonl")).read_text()
    assert "cut off by the token limit inside this call's arguments" in transcript and '"event": "cut_off"' not in transcript.split("\n")[0]
    assert "have no committed success (exit 1)" in done.stderr


def test_a_run_whose_samples_all_fail_exits_1_and_a_rerun_that_passes_exits_0(standin_dataset, tmp_path):
    with start_background(host="127.0.0.1", port=0, dialects=("stream-only",)) as gateway:
        failed = gdpval(*run_args(standin_dataset, gateway.base_url, str(tmp_path), "--limit", "2"))
        assert failed.returncode == 1, failed.stderr
        rerun = gdpval(*run_args(standin_dataset, gateway.base_url, str(tmp_path), "--limit", "2", "--stream", "--retry-failed"))
    assert rerun.returncode == 0, rerun.stderr
    assert {r["status"] for r in pq.read_table(tmp_path / "runs/t/results.parquet").to_pylist()} == {"succeeded"}

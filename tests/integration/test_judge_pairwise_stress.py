"""A whole `gdpval run` of the 220-task stress dataset (13 columns, gold stand-ins in docx, xlsx and pdf) with the
scripted model, then `gdpval judge --method pairwise` killed with -9 midway and resumed: the scripted judge answers
each (pair, order) once, the totals are those the dataset implies, and the gold is nowhere in the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pyarrow.parquet as pq
import pytest

from gdpval.dataset.loader import load_dataset
from gdpval.fakemodel.server import start_background
from gdpval.judge.pairwise import GOLD, load_pairs
from gdpval.judge.store import load_pair_results
from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import stress
from support.cli import GDPVAL, gdpval, run_args
from support.judged import PREFER_GOLD_ON_REFERENCES, expected_verdicts
from support.polling import wait_until

pytestmark = pytest.mark.slow

CONCURRENCY = 4
CALLS = 2 * stress.TASKS  # every sample has a deliverable: both orders of each pair
ANSWERED_BEFORE_KILL = CALLS // 2 + 1  # odd: at least one pair is cut between its two orders


def test_a_whole_run_is_judged_pairwise_killed_and_resumed_without_judging_a_pair_twice(tmp_path):
    data = stress.make_stress_dataset(tmp_path / "dataset", "current")
    out = tmp_path / "out"
    env = {**os.environ, "TMPDIR": str(tmp_path), runtime.RUNTIMES_ENV: str(tmp_path / "no-runtimes")}
    judge_args = ["judge", "--method", "pairwise", "--output", str(out), "--run-name", "stress", "--judge-model", "scripted",
                  "--concurrency", str(CONCURRENCY), "--no-preflight", "--cache-dir", str(tmp_path / "cache"),
                  "--price-prompt", "2.5", "--price-completion", "10"]  # fmt: skip
    with start_background(judge_prefers=PREFER_GOLD_ON_REFERENCES) as model:
        ran = gdpval(*run_args(data, model.base_url, out, run_name="stress"), env=env, timeout=900)
        assert ran.returncode == 0, ran.stderr[-4000:]
        assert {r["status"] for r in pq.read_table(out / "runs/stress/results.parquet").to_pylist()} == {"succeeded"}
        agent_calls = model.stats()["completions"]
        model.hold(ANSWERED_BEFORE_KILL)
        proc = subprocess.Popen([GDPVAL, *judge_args, "--judge-base-url", model.base_url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: model.stats()["held"] == CONCURRENCY or proc.poll() is not None, 600, "every judge worker waiting on a held reply")
            answered = model.stats()["completions"] - agent_calls  # every answered call is written before its worker asks again
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait()
            model.release(cut=True)  # the held calls' client is gone: they get no answer
        assert proc.returncode == -signal.SIGKILL and answered == ANSWERED_BEFORE_KILL
        judged_before = set(load_pairs(LocalStorage(out), "stress", GOLD, "scripted"))
        left = list(tmp_path.glob("gdpval-pairwise-*"))  # kill -9 runs no cleanup: the held workers' copies of the gold stay
        assert len(left) == CONCURRENCY, left
        assert 0 < len(judged_before) < stress.TASKS

        done = gdpval(*judge_args, "--judge-base-url", model.base_url, env=env, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        assert not list(tmp_path.glob("gdpval-pairwise-*"))  # the resumed judging removed them, then its own
        stats = model.stats()
    assert stats["completions"] - agent_calls == CALLS and stats["judge_repeats"] == 0 and stats["faults"]["cut"] == CONCURRENCY
    summary = json.loads(done.stdout)["pairwise"]
    assert summary["reused"] == len(judged_before) and summary["label"] == "local estimate against the public gold, not OpenAI's grade"

    results = load_pair_results(LocalStorage(out), "stress")
    assert results is not None
    expected = expected_verdicts(pq.read_table(data / stress.PARQUET).to_pylist())
    got = {group: (t.wins, t.ties, t.losses) for group, t in ({"": results.overall} | results.by_sector).items()}
    assert got == expected and 0 < expected[""][2] < stress.TASKS
    overall = results.overall
    assert (overall.samples, overall.inconsistent, overall.failed, overall.no_deliverable) == (stress.TASKS, 0, 0, 0)
    assert overall.wins_or_ties == pytest.approx(expected[""][1] / stress.TASKS, abs=1e-4) and len(results.by_occupation) == 44  # rounded to 4 places
    usage = results.usage  # a pair cut between its two orders took its first order from the call cache: still counted as spent
    assert (usage.calls, usage.cached_calls) == (CALLS, 0) and usage.cost is not None and usage.cost > 0
    assert sum(r.cached for s in results.samples for r in s.replies) % 2 == 1

    dataset = load_dataset(str(data), revision=None, cache_dir=tmp_path / "cache")
    gold = {(data / p).read_bytes() for paths in (dataset.gold or {}).values() for p in paths}
    for path in (out / "runs" / "stress").rglob("*"):
        if path.is_file() and "judge" not in path.relative_to(out).parts:
            content = path.read_bytes()
            assert content not in gold and stress.GOLD_MARK.encode() not in content and b"judge-only" not in content, path
    assert LocalStorage(out).exists(layout.gold_index(dataset.ref.key))

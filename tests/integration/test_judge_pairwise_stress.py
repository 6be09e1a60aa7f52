"""Pairwise judging of a whole 220-sample run of the stress dataset (13 columns, gold stand-ins in real formats) with
`gdpval judge --method pairwise`, killed with -9 midway and resumed: no pair judged twice, the gold nowhere in the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from gdpval.dataset.loader import load_dataset
from gdpval.fakemodel.server import start_background
from gdpval.judge.pairwise import GOLD, load_pairs
from gdpval.judge.store import load_pair_results
from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from support import runs, stress
from support.cli import GDPVAL, gdpval
from support.polling import wait_until
from support.standins import standin_bytes

pytestmark = pytest.mark.slow

FORMATS = ("docx", "xlsx", "pdf")
UNMADE = (0, 55, 110, 165)  # samples that never committed: losses without a judge call
CONCURRENCY = 4


def test_a_whole_run_is_judged_pairwise_killed_and_resumed_without_judging_a_pair_twice(tmp_path):
    dataset = load_dataset(str(stress.make_stress_dataset(tmp_path / "dataset", "current")), revision=None, cache_dir=tmp_path / "cache")
    storage = LocalStorage(tmp_path / "out")
    entries = runs.entries(dataset.tasks)
    runs.write_run(storage, "stress", entries, dataset=dataset.ref)
    for i, entry in enumerate(entries):
        if i not in UNMADE:
            name = f"answer.{FORMATS[i % 3]}"
            files = {name: standin_bytes(f"answer {i}.{FORMATS[i % 3]}")}
            runs.commit(storage, "stress", entry, 1, runs.succeeded(entry, 1, files), files)
    calls = 2 * (len(entries) - len(UNMADE))
    env = {**os.environ, "TMPDIR": str(tmp_path), runtime.RUNTIMES_ENV: str(tmp_path / "no-runtimes")}

    def judge_args(base_url: str) -> list[str]:
        return ["judge", "--method", "pairwise", "--output", str(tmp_path / "out"), "--run-name", "stress", "--judge-model", "judge",
                "--judge-base-url", base_url, "--concurrency", str(CONCURRENCY), "--no-preflight", "--cache-dir", str(tmp_path / "cache"),
                "--price-prompt", "2.5", "--price-completion", "10"]  # fmt: skip

    prefers = f"text:{stress.GOLD_MARK}"
    with start_background(model="judge", judge_prefers=prefers, hold_after=calls // 2) as first:
        proc = subprocess.Popen([GDPVAL, *judge_args(first.base_url)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: first.stats()["held"] == CONCURRENCY or proc.poll() is not None, 600, "every judge worker waiting on a held reply")
            answered = first.stats()["completions"]  # every answered call is written before its worker asks again
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait()
        assert proc.returncode == -signal.SIGKILL and answered == calls // 2
    judged_before = set(load_pairs(storage, "stress", GOLD))
    assert 0 < len(judged_before) < len(entries)

    with start_background(model="judge", judge_prefers=prefers) as second:
        done = gdpval(*judge_args(second.base_url), env=env, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        assert answered + second.stats()["completions"] == calls  # no call asked twice, so no pair judged twice
    summary = json.loads(done.stdout)["pairwise"]
    assert summary["reused"] == len(judged_before) and summary["label"] == "local estimate against the public gold, not OpenAI's grade"
    results = load_pair_results(storage, "stress")
    assert results is not None and results.overall.samples == len(entries)
    overall = results.overall
    assert (overall.losses, overall.no_deliverable, overall.wins, overall.failed, overall.wins_or_ties) == (len(entries), len(UNMADE), 0, 0, 0.0)
    assert set(results.by_sector) == set(stress.OCCUPATIONS) and len(results.by_occupation) == 44
    assert results.usage.cost is not None and results.usage.cost > 0

    gold = {(tmp_path / "dataset" / p).read_bytes() for paths in (dataset.gold or {}).values() for p in paths}
    for path in (tmp_path / "out" / "runs" / "stress").rglob("*"):
        if path.is_file() and "judge" not in path.relative_to(tmp_path / "out").parts:
            data = path.read_bytes()
            assert data not in gold and stress.GOLD_MARK.encode() not in data and b"judge-only" not in data, path
    assert storage.exists(layout.gold_index(dataset.ref.key))

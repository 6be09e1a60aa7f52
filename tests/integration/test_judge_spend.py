"""The judge's spend survives what its memory does not: a pairwise judge killed with -9 between a pair's two orders,
then resumed, counts the first order's call (answered before the kill, cached, never committed in a verdict) as
spent; a rubric sample judged again after failing counts its earlier tries too."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from gdpval.agent.client import make_client
from gdpval.fakemodel.server import start_background
from gdpval.judge.pairwise import GOLD, load_pairs
from gdpval.judge.run import JudgeOptions, judge_run
from gdpval.judge.store import load_pair_results
from gdpval.sandbox import runtime
from gdpval.storage.local import LocalStorage
from support.cli import GDPVAL, gdpval
from support.judged import make_run, stress_dataset
from support.polling import wait_until

pytestmark = pytest.mark.slow

RUN = "spent"
TASKS = 3
CALLS = 2 * TASKS  # both orders of every pair
ANSWERED_BEFORE_KILL = 3  # one worker: the first pair, then the second pair's first order; its second order is held


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return stress_dataset(tmp_path_factory.mktemp("spend"))


def test_calls_answered_before_a_kill_are_counted_after_the_resume(tmp_path, dataset):
    storage = LocalStorage(tmp_path / "out")
    make_run(storage, dataset, RUN, TASKS)
    env = {**os.environ, "TMPDIR": str(tmp_path), runtime.RUNTIMES_ENV: str(tmp_path / "no-runtimes")}
    args = ["judge", "--method", "pairwise", "--output", str(tmp_path / "out"), "--run-name", RUN, "--judge-model", "judge", "--concurrency", "1",
            "--no-preflight", "--cache-dir", str(tmp_path / "cache"), "--price-prompt", "2.5", "--price-completion", "10"]  # fmt: skip
    with start_background(model="judge") as model:
        model.hold(ANSWERED_BEFORE_KILL)
        proc = subprocess.Popen([GDPVAL, *args, "--judge-base-url", model.base_url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: model.stats()["held"] == 1 or proc.poll() is not None, 300, "the judge waiting on the held reply")
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait()
            model.release(cut=True)
        assert proc.returncode == -signal.SIGKILL and model.stats()["completions"] == ANSWERED_BEFORE_KILL
        assert len(load_pairs(storage, RUN, GOLD, "judge")) == 1  # the second pair's first order is answered and cached, not committed
        done = gdpval(*args, "--judge-base-url", model.base_url, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert model.stats()["completions"] == CALLS and model.stats()["judge_repeats"] == 0
    results = load_pair_results(storage, RUN)
    assert results is not None
    cut = results.samples[1]
    assert cut.replies[0].cached and cut.usage.calls == 2 and cut.usage.prompt_tokens > 0  # its cached first order was this pair's call
    assert (results.usage.calls, results.usage.cached_calls) == (CALLS, 0) and results.usage.cost == pytest.approx(
        sum(s.usage.cost or 0 for s in results.samples)
    )


def test_a_rubric_sample_judged_again_counts_the_tries_of_its_failed_judging(tmp_path, dataset):
    storage = LocalStorage(tmp_path / "out")
    make_run(storage, dataset, RUN, 1)
    options = JudgeOptions(model="judge", backoff_seconds=0, tries=2, cache_dir=tmp_path / "cache")
    with start_background(model="judge", faults={"malformed": 1.0}, fault_repeats=100) as broken:
        failed = judge_run(storage, RUN, make_client(broken.base_url), options).results.samples[0]
    assert failed.status == "failed" and failed.usage.calls == 2  # two malformed replies: answered, so spent
    with start_background(model="judge") as healthy:
        scored = judge_run(storage, RUN, make_client(healthy.base_url), options).results.samples[0]
    assert scored.status == "scored" and scored.usage.calls == 3

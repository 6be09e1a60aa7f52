"""A real OpenAI-compatible server that is not ours: LiteLLM's proxy on 127.0.0.1, in front of
`gdpval fake-model`, driven by a real `gdpval run`. LiteLLM re-encodes every request and reply
(its own ids, chunking and usage), so this is the agent meeting a gateway's dialect, not our own.

The proxy (tests/support/litellm.py) waits on its install by hack/litellm.sh and fails, saying why,
when it cannot be made: nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support import litellm
from support.cli import gdpval, run_args


@pytest.fixture(scope="module")
def proxy(scripted_model, tmp_path_factory) -> Iterator[str]:
    """LiteLLM's proxy serving `scripted` from the fake model; its base URL."""
    try:
        with litellm.proxy(scripted_model.base_url, "scripted", tmp_path_factory.mktemp("litellm")) as url:
            yield url
    except litellm.NotInstalled as exc:
        pytest.fail(str(exc))


def results(out: Path) -> list[dict]:
    return pq.read_table(out / "runs/t/results.parquet").to_pylist()


@pytest.mark.parametrize("mode", [[], ["--stream"]], ids=["whole", "streamed"])
def test_a_run_through_litellm_succeeds(mode, proxy, standin_dataset, tmp_path):
    done = gdpval(*run_args(standin_dataset, proxy, str(tmp_path), "--limit", "2", *mode))
    assert done.returncode == 0, done.stderr
    rows = results(tmp_path)
    assert [(r["status"], r["finish_reason"], r["deliverable_count"]) for r in rows] == [("succeeded", "stop", 1)] * 2
    assert all(r["input_tokens"] > 0 and r["unmetered_turns"] == 0 for r in rows)


def test_a_reply_cut_off_behind_litellm_is_truncated_not_succeeded(proxy, standin_dataset, tmp_path):
    done = gdpval(*run_args(standin_dataset, proxy, str(tmp_path), "--limit", "1", "--max-tokens", "30"))
    assert done.returncode == 1, done.stderr
    assert [(r["status"], r["error_kind"], r["finish_reason"]) for r in results(tmp_path)] == [("failed", "truncated", "length")]

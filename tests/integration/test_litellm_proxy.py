"""A real OpenAI-compatible server that is not ours: LiteLLM's proxy on 127.0.0.1, in front of
`gdpval fake-model`, driven by a real `gdpval run`. LiteLLM re-encodes every request and reply
(its own ids, chunking and usage), so this is the agent meeting a gateway's dialect, not our own.

The proxy lives in its own venv outside git (hack/litellm.sh, which `hack/setup.sh --test` starts in
the background); the fixture waits on that install and fails, saying why, when it cannot be made.
"""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from support.cli import gdpval, run_args
from support.polling import wait_until

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 1800  # a cold install on a loaded machine; cached, it returns at once
START_TIMEOUT_S = 180  # the proxy imports a lot before it listens


def litellm_bin() -> Path:
    done = subprocess.run([str(REPO / "hack/litellm.sh")], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"LiteLLM's proxy could not be installed by hack/litellm.sh (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def proxy(scripted_model, tmp_path_factory) -> Iterator[str]:
    """LiteLLM's proxy serving `scripted` from the fake model; its base URL."""
    binary = litellm_bin() / "litellm"
    folder = tmp_path_factory.mktemp("litellm")
    config = folder / "config.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: scripted\n"
        "    litellm_params:\n"
        "      model: openai/scripted\n"
        f"      api_base: {scripted_model.base_url}\n"
        "      api_key: unused\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    port = free_port()
    # No traffic off this machine: the model price map is the one LiteLLM ships, not a download.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "NO_PROXY": "*"}
    log = (folder / "proxy.log").open("w")
    server = subprocess.Popen([str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(
            lambda: server.poll() is not None or answers(f"http://127.0.0.1:{port}/health/liveliness"), START_TIMEOUT_S, "LiteLLM's proxy to listen", 0.5
        )
        assert server.poll() is None, f"LiteLLM's proxy exited ({server.returncode}):\n{(folder / 'proxy.log').read_text()[-3000:]}"
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


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

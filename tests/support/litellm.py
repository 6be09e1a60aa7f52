"""LiteLLM's proxy on 127.0.0.1 in front of a model server: a real OpenAI-compatible gateway that is
not ours, for tests and benchmarks. It lives in its own venv outside git (hack/litellm.sh, which
`hack/setup.sh --test` starts in the background); `install` waits on that and fails, saying why,
when it cannot be made."""

from __future__ import annotations

import os
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.polling import wait_until
from support.processes import free_port, stop

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 1800  # a cold install on a loaded machine; cached, it returns at once
START_TIMEOUT_S = 180  # the proxy imports a lot before it listens


class NotInstalled(RuntimeError):
    """hack/litellm.sh failed: the message carries its log's tail."""


def install() -> Path:
    """The bin folder of LiteLLM's venv, installed first if need be."""
    done = subprocess.run([str(REPO / "hack/litellm.sh")], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise NotInstalled(f"LiteLLM's proxy could not be installed by hack/litellm.sh (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def proxy(upstream: str, model: str, folder: Path) -> Iterator[str]:
    """LiteLLM's proxy serving `model` from the OpenAI-compatible `upstream` base URL; yields its base URL."""
    binary = install() / "litellm"
    config = folder / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: {upstream}\n"
        "      api_key: unused\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
    )
    port = free_port()
    # No traffic off this machine: the model price map is the one LiteLLM ships, not a download.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "NO_PROXY": "*"}
    log_path = folder / "litellm.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        try:
            health = f"http://127.0.0.1:{port}/health/liveliness"
            wait_until(lambda: server.poll() is not None or _answers(health), START_TIMEOUT_S, "LiteLLM's proxy to listen", 0.5)
            if server.poll() is not None:
                raise RuntimeError(f"LiteLLM's proxy exited ({server.returncode}):\n{log_path.read_text()[-3000:]}")
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            stop(server)

"""What a real gateway adds to a model turn: the scripted model (`gdpval fake-model`, zero latency)
called directly and through LiteLLM's proxy (hack/litellm.sh), each whole and streamed, through the
real openai client and the agent's own reply parsing. Prints one JSON object of figures in ms.

    .venv/bin/python bench/gateway.py --turns 200 > bench/results/gateway.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gdpval.agent.reply import assemble_stream, parse_completion  # noqa: E402
from gdpval.fakemodel.server import start_background  # noqa: E402
from support import litellm  # noqa: E402

PROMPT = "Inventory the files.\n\n---\nWorking directory: /w\nDeliverables folder: /w/deliverable_files\nReference files: none"


def turn_ms(client: openai.OpenAI, stream: bool) -> float:
    """One first turn of the scripted conversation (a tool call), read as the agent reads it."""
    messages = [{"role": "user", "content": PROMPT}]
    start = time.perf_counter()
    if stream:
        with client.chat.completions.create(model="scripted", messages=messages, stream=True, stream_options={"include_usage": True}) as chunks:
            body = assemble_stream(chunk.to_dict() for chunk in chunks)
    else:
        body = client.chat.completions.with_raw_response.create(model="scripted", messages=messages).http_response.json()
    reply = parse_completion(body, 0)
    elapsed = (time.perf_counter() - start) * 1000
    assert reply.tool_calls and reply.tool_calls[0].name == "python_exec", reply
    return elapsed


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered), 2),
        "mean": round(statistics.fmean(ordered), 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
    }


def measure(base_url: str, turns: int) -> dict[str, dict[str, float]]:
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    out = {}
    for stream in (False, True):
        for _ in range(5):  # warm up connections and the proxy's first-request paths
            turn_ms(client, stream)
        out["streamed" if stream else "whole"] = figures([turn_ms(client, stream) for _ in range(turns)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="Turns measured per path and mode.")
    turns = parser.parse_args().turns
    with start_background() as model, tempfile.TemporaryDirectory() as folder:
        result = {"turns": turns, "direct": measure(model.base_url, turns)}
        with litellm.proxy(model.base_url, "scripted", Path(folder)) as proxied:
            result["litellm"] = measure(proxied, turns)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

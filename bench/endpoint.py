"""A run against an endpoint that limits concurrency, and one that goes away, in real time.

  ratelimit: the scripted model answers 429 to a chat call arriving while N others are in flight.
      Side by side over the same samples: `--parallelism P` (P > N, the adaptive limiter finds N)
      and `--parallelism N` (the limit known in advance). Reports wall time, 429s, and the calls in
      flight at the server sampled every 0.1 s (mean and median over the run's middle half).
  outage: a run whose endpoint answers 503 to everything for SECONDS after its AFTER-th chat call;
      reports wall time, samples, attempts and the outage lines.

Usage: .venv/bin/python bench/endpoint.py ratelimit [--n 3] [--parallelism 12] [--repeats 3]
       .venv/bin/python bench/endpoint.py outage [--seconds 600] [--after 150] [--samples 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import pyarrow.parquet as pq  # noqa: E402

from gdpval.fakemodel.server import FakeModelServer, start_background  # noqa: E402
from support.cli import gdpval, run_args  # noqa: E402
from support.standins import make_standin_dataset, sample_dataset_path  # noqa: E402


def sampled(server: FakeModelServer, stop: threading.Event, out: list[int]) -> None:
    while not stop.wait(0.1):
        out.append(server.stats()["in_flight"])


def one_run(dataset: Path, server: FakeModelServer, parallelism: int, extra: list[str]) -> dict[str, object]:
    before = server.stats()
    seen: list[int] = []
    stop = threading.Event()
    watcher = threading.Thread(target=sampled, args=(server, stop, seen), daemon=True)
    with tempfile.TemporaryDirectory() as out:
        watcher.start()
        started = time.monotonic()
        done = gdpval(*run_args(dataset, server.base_url, out, "--parallelism", str(parallelism), *extra), timeout=7200)
        wall = time.monotonic() - started
        stop.set()
        watcher.join()
        rows = pq.read_table(Path(out) / "runs/t/results.parquet").to_pylist()
    after = server.stats()
    middle = seen[len(seen) // 4 : 3 * len(seen) // 4] or [0]
    return {
        "parallelism": parallelism,
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "succeeded": sum(r["status"] == "succeeded" for r in rows),
        "samples": len(rows),
        "max_attempt": max(r["attempt"] or 0 for r in rows),
        "rejected_429": after["faults"].get("concurrency", 0) - before["faults"].get("concurrency", 0),
        "completions": after["completions"] - before["completions"],
        "in_flight_mean": round(statistics.fmean(middle), 2),
        "in_flight_median": statistics.median(middle),
        "lines": [line for line in done.stderr.splitlines() if "endpoint" in line or "budget" in line],
    }


def ratelimit(dataset: Path, n: int, parallelism: int, repeats: int, latency: float) -> dict[str, object]:
    extra = ["--repeats", str(repeats)]
    with start_background(max_concurrent=n, latency=latency, retry_after=0.5) as server:
        adaptive = one_run(dataset, server, parallelism, extra)
        fixed = one_run(dataset, server, n, extra)
    return {"n": n, "latency_s": latency, "adaptive": adaptive, "fixed": fixed}


def outage(dataset: Path, seconds: float, after: int, samples: int, parallelism: int, latency: float) -> dict[str, object]:
    extra = ["--limit", "10", "--repeats", str(max(1, samples // 10))]
    with start_background(outage_after=after, outage_seconds=seconds, latency=latency) as server:
        result = one_run(dataset, server, parallelism, extra)
        result["outage_503s"] = server.stats()["statuses"].get(503, 0)
    return {"outage_s": seconds, "after_calls": after, **result}


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    rl = sub.add_parser("ratelimit")
    rl.add_argument("--n", type=int, default=3)
    rl.add_argument("--parallelism", type=int, default=12)
    rl.add_argument("--repeats", type=int, default=3)
    rl.add_argument("--latency", type=float, default=1.0)
    out = sub.add_parser("outage")
    out.add_argument("--seconds", type=float, default=600)
    out.add_argument("--after", type=int, default=150)
    out.add_argument("--samples", type=int, default=50)
    out.add_argument("--parallelism", type=int, default=4)
    out.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = make_standin_dataset(sample_dataset_path(), Path(tmp) / "dataset")
        if args.what == "ratelimit":
            figures = ratelimit(dataset, args.n, args.parallelism, args.repeats, args.latency)
        else:
            figures = outage(dataset, args.seconds, args.after, args.samples, args.parallelism, args.latency)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""Conversion seconds per file type through gdpval.render, cache cold and warm.

Each stand-in file (tests/support/standins.py) is rendered `--rounds` times into a fresh cache (cold:
guard, child or sandbox, worker) and then once more from that cache (warm). Prints JSON: per file
type the renderer, the cold median and max, the warm median, and whether it opened.

    .venv/bin/python bench/render.py --rounds 3 > bench/results/render.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from gdpval.render import view_file  # noqa: E402
from support.standins import standin_bytes  # noqa: E402

FILES = ["model.xlsx", "memo.docx", "deck.pptx", "report.pdf", "chart.png", "photo.jpg", "voice.wav", "notes.md"]


def measure(name: str, rounds: int, work: Path) -> dict[str, object]:
    path = work / name
    path.write_bytes(standin_bytes(name))
    cold, warm = [], []
    for round_ in range(rounds):
        cache = work / f"cache-{name}-{round_}"
        started = time.monotonic()
        view = view_file(path, name, cache_base=cache)
        cold.append(time.monotonic() - started)
        started = time.monotonic()
        view_file(path, name, cache_base=cache)
        warm.append(time.monotonic() - started)
    return {
        "file": name,
        "renderer": view.renderer,
        "opens": not view.unrenderable,
        "images": len(view.images),
        "cold_median_s": round(statistics.median(cold), 3),
        "cold_max_s": round(max(cold), 3),
        "warm_median_ms": round(1000 * statistics.median(warm), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdpval-bench-render-") as work:
        print(json.dumps([measure(name, args.rounds, Path(work)) for name in FILES], indent=2))


if __name__ == "__main__":
    main()

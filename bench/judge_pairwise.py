"""Judging cost per sample, pairwise against the gold: calls, tokens, conversion seconds, wall time, cache cold and warm.

A hand-made run over the first N tasks of the stress dataset (current revision; deliverables and gold
stand-ins in docx, xlsx and pdf), judged in process through the real openai client by `gdpval fake-model`'s
pairwise judge. Four passes: cold (nothing cached, the render cache a fresh folder), renderings warm
(verdicts and call cache deleted, the renderings kept: every call made again, no conversion), calls warm
(verdict files deleted, the call cache kept: no rendering, no calls), verdicts warm (every verdict reused). Conversion
goes through the full runtime's LibreOffice when one is built (`gdpval runtime build`), else the host child.
Prints JSON lines: the renderer, then per pass the figures per sample, overall and by the deliverable's type
(wall seconds only for all: the samples of a pass run at once).

    .venv/bin/python bench/judge_pairwise.py --tasks 12
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gdpval.agent.client import make_client  # noqa: E402
from gdpval.dataset.loader import load_dataset  # noqa: E402
from gdpval.fakemodel.server import start_background  # noqa: E402
from gdpval.judge.inputs import Inputs  # noqa: E402
from gdpval.judge.pairwise import GOLD, PairOptions, judge_pairs  # noqa: E402
from gdpval.judge.request import JudgeOptions  # noqa: E402
from gdpval.judge.usage import Usage  # noqa: E402
from gdpval.judge.verdicts import PairScore  # noqa: E402
from gdpval.records import load_record  # noqa: E402
from gdpval.render import cache, child  # noqa: E402
from gdpval.storage import layout  # noqa: E402
from gdpval.storage.local import LocalStorage  # noqa: E402
from support import runs, stress  # noqa: E402
from support.standins import standin_bytes  # noqa: E402

FORMATS = ("docx", "xlsx", "pdf")


def per_sample(name: str, group: str, samples: list[PairScore], usage: Usage, wall: float | None, reused: bool) -> dict[str, object]:
    n = len(samples)
    return {
        "pass": name,
        "deliverable": group,
        "samples": n,
        "calls_per_sample": usage.calls / n,
        "cached_calls_per_sample": usage.cached_calls / n,
        "prompt_tokens_per_sample": round(usage.prompt_tokens / n),
        "completion_tokens_per_sample": round(usage.completion_tokens / n),
        "convert_seconds_per_sample": 0.0 if reused else round(sum(s.convert_seconds for s in samples) / n, 3),
        "wall_seconds_per_sample": None if wall is None else round(wall / n, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-judge-") as tmp:
        root = Path(tmp)
        os.environ[cache.CACHE_ENV] = str(root / "render")  # cold means cold: renderings from earlier runs are not reused
        dataset = load_dataset(str(stress.make_stress_dataset(root / "dataset", "current")), revision=None, cache_dir=root / "cache")
        storage = LocalStorage(root / "out")
        entries = runs.entries(dataset.tasks[: args.tasks])
        runs.write_run(storage, "bench", entries, dataset=dataset.ref)
        formats = {}
        for i, entry in enumerate(entries):
            formats[entry.sample.sample_id] = FORMATS[i % 3]
            files = {f"answer.{FORMATS[i % 3]}": standin_bytes(f"answer {i}.{FORMATS[i % 3]}")}
            runs.commit(storage, "bench", entry, 1, runs.succeeded(entry, 1, files), files)
        options = PairOptions(JudgeOptions(model="judge", concurrency=args.concurrency, cache_dir=root / "cache"))
        print(json.dumps({"renderer": child.renderer_label(child.full_runtime()), "tasks": len(entries), "concurrency": args.concurrency}))
        with start_background(model="judge") as server:
            client = make_client(server.base_url)
            for name in ("cold", "renderings warm", "calls warm", "verdicts warm"):
                if name in ("renderings warm", "calls warm"):
                    for key in list(storage.list(f"{layout.judge_pairs('bench', GOLD)}/samples")):
                        storage.delete(key)
                if name == "renderings warm":
                    for key in list(storage.list("judge-calls")):
                        storage.delete(key)
                start = time.monotonic()
                judged = judge_pairs(storage, "bench", client, options, Inputs(storage, load_record(storage, "bench"), root / "cache"))
                wall = time.monotonic() - start
                samples = judged.results.samples
                print(json.dumps(per_sample(name, "all", samples, judged.results.usage, wall, judged.reused > 0)))
                for kind in FORMATS:
                    group = [s for s in samples if formats[s.sample_id] == kind]
                    usage = sum((s.usage for s in group), Usage())
                    print(json.dumps(per_sample(name, kind, group, usage, None, judged.reused > 0)))


if __name__ == "__main__":
    main()

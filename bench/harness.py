"""Harness overhead with the scripted model at zero latency: what the tool adds around a model.

Measures, side by side in one run (machines here are noisy; compare ratios, not absolutes):
  1. one tool-call round trip (client -> tool server -> bash -> back), bubblewrap vs plain process;
  2. the fixed cost of a sample: sandbox start + stop, bubblewrap vs plain, and bubblewrap hardened (user
     namespace, seccomp, cgroup, loop-mounted disk where allowed) vs unhardened, interleaved start by start,
     and (hardened) over the full sandbox image unpacked as the root vs the host's /usr and /etc, interleaved;
  3. `gdpval run` over the 12-task sample at concurrency 1 and 4 (wall time, per-sample mean).
  4. with --imports OTHER_RUNTIME: a python_exec importing the document libraries models reach for, in a
     sandbox over the current full runtime and one over another (say, one built before a change), alternating.
Usage: .venv/bin/python bench/harness.py [--calls 200] [--starts 20] [--sandbox-only | --runtime-only]
       .venv/bin/python bench/harness.py --imports OTHER_RUNTIME_FOLDER [--calls 20]
       .venv/bin/python bench/harness.py --sandbox-only --against OTHER_CHECKOUT [--starts 20] [--calls 200]
With --against, hardened sandbox start + stop and tool-call round trips of this tree and of another
checkout (run by that checkout's own .venv), alternating sandbox by sandbox, and their ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gdpval.fakemodel.server import start_background  # noqa: E402
from gdpval.sandbox.client import SandboxClient  # noqa: E402
from gdpval.sandbox.limits import Limits  # noqa: E402
from gdpval.sandbox.limits.report import check as check_limits  # noqa: E402
from gdpval.sandbox.local import LocalSandbox  # noqa: E402
from gdpval.sandbox.runtime import BUILD_IT, Runtime, current, load  # noqa: E402
from support.cli import gdpval, run_args  # noqa: E402
from support.standins import make_standin_dataset  # noqa: E402

SAMPLE = ROOT.parent / "shared" / "data" / "gdpval-v1-sample"


def summarize(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    return {"mean_ms": statistics.fmean(ms), "p50_ms": ms[len(ms) // 2], "p95_ms": ms[int(len(ms) * 0.95) - 1]}


def round_trips(isolation: str, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, LocalSandbox(Path(tmp), {}, isolation=isolation) as box:
        client = SandboxClient(box.address, box.token)
        client.call("bash", {"command": "true", "timeout": 10}, 10)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            client.call("bash", {"command": "true", "timeout": 10}, 10)
            times.append(time.perf_counter() - start)
    return summarize(times)


def one_start_stop(isolation: str, harden: bool = True, system: Runtime | None = None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        with LocalSandbox(Path(tmp), {}, isolation=isolation, harden=harden, system=system) as box:  # type: ignore[arg-type]
            SandboxClient(box.address, box.token).wait_ready(30)
        return time.perf_counter() - start


def sandbox_start_stop(isolation: str, starts: int) -> dict[str, float]:
    return summarize([one_start_stop(isolation) for _ in range(starts)])


def hardening_cost(starts: int) -> dict[str, object]:
    """Hardened and unhardened bubblewrap sandboxes, alternating, so both see the same machine load."""
    hardened, plain = [], []
    for _ in range(starts):
        hardened.append(one_start_stop("bwrap", harden=True))
        plain.append(one_start_stop("bwrap", harden=False))
    report: dict[str, object] = {"hardened": summarize(hardened), "unhardened": summarize(plain), "limits": check_limits(Limits.of())}
    report["ratio_p50"] = summarize(hardened)["p50_ms"] / summarize(plain)["p50_ms"]
    report["ratio_mean"] = summarize(hardened)["mean_ms"] / summarize(plain)["mean_ms"]
    return report


def runtime_cost(starts: int) -> dict[str, object]:
    """Hardened sandboxes over the full runtime and over the host's system folders, alternating."""
    full = current()
    if full is None:
        raise SystemExit(f"no full runtime to measure: {BUILD_IT}")
    image, host = [], []
    for _ in range(starts):
        image.append(one_start_stop("bwrap", system=full))
        host.append(one_start_stop("bwrap", system=Runtime()))
    report: dict[str, object] = {"runtime": full.label, "full": summarize(image), "host": summarize(host)}
    report["ratio_p50"] = summarize(image)["p50_ms"] / summarize(host)["p50_ms"]
    report["ratio_mean"] = summarize(image)["mean_ms"] / summarize(host)["mean_ms"]
    return report


# What a model's python_exec typically starts with: each call is a fresh interpreter.
DOCUMENT_IMPORTS = "import pandas, numpy, openpyxl, docx, pptx, matplotlib.pyplot, reportlab.pdfgen.canvas, PIL.Image, fitz"


def import_cost(other: Path, calls: int) -> dict[str, object]:
    """python_exec of DOCUMENT_IMPORTS over the current full runtime and over `other`, call by call alternating."""
    runtimes = {"current": current(), "other": load(other)}
    if runtimes["current"] is None:
        raise SystemExit(f"no full runtime to measure: {BUILD_IT}")
    times: dict[str, list[float]] = {name: [] for name in runtimes}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        clients = {}
        for name, system in runtimes.items():
            (Path(tmp) / name).mkdir()
            clients[name] = stack.enter_context(LocalSandbox(Path(tmp) / name, {}, isolation="bwrap", system=system)).client()
        for _ in range(calls):
            for name, client in clients.items():
                start = time.perf_counter()
                out = client.call("python_exec", {"code": DOCUMENT_IMPORTS}, 120)
                times[name].append(time.perf_counter() - start)
                if out.exit_code != 0:
                    raise SystemExit(f"{name}: the imports failed: {out.output[-500:]}")
    report: dict[str, object] = {name: {"runtime": r.label, **summarize(times[name])} for name, r in runtimes.items() if r}
    report["ratio_p50"] = summarize(times["current"])["p50_ms"] / summarize(times["other"])["p50_ms"]
    return report


# Run by each tree's own interpreter: the API both trees share. One sandbox: its start + stop, then
# its share of the tool calls.
PROBE = """
import json, sys, tempfile, time
from pathlib import Path
from gdpval.sandbox.client import SandboxClient
from gdpval.sandbox.local import LocalSandbox
with tempfile.TemporaryDirectory() as tmp:
    began = time.perf_counter()
    box = LocalSandbox(Path(tmp), {}, isolation="bwrap")
    box.start()
    started = time.perf_counter() - began
    client = SandboxClient(box.address, box.token)
    calls = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        client.call("bash", {"command": "true", "timeout": 10}, 10)
        calls.append(time.perf_counter() - t)
    t = time.perf_counter()
    box.stop()
print(json.dumps({"start_stop": started + time.perf_counter() - t, "calls": calls}))
"""


def tree_cost(other: Path, starts: int, calls: int) -> dict[str, object]:
    """This tree against `other`, sandbox by sandbox, alternating, so both see the same machine load."""
    trees = {"this": ROOT, "other": other.resolve()}
    seen: dict[str, dict[str, list[float]]] = {name: {"start_stop": [], "calls": []} for name in trees}
    for _ in range(starts):
        for name, tree in trees.items():
            argv = [str(tree / ".venv" / "bin" / "python"), "-c", PROBE, str(max(1, calls // starts))]
            probe = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True, cwd=tree).stdout)
            seen[name]["start_stop"].append(probe["start_stop"])
            seen[name]["calls"] += probe["calls"]
    report: dict[str, object] = {"other": str(trees["other"]), "limits": check_limits(Limits.of())}
    for measure in ("start_stop", "calls"):
        this, base = summarize(seen["this"][measure]), summarize(seen["other"][measure])
        report[measure] = {"this": this, "other": base, "ratio_p50": this["p50_ms"] / base["p50_ms"], "ratio_mean": this["mean_ms"] / base["mean_ms"]}
    return report


def full_run(dataset: Path, base_url: str, concurrency: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        done = gdpval(*run_args(dataset, base_url, out, "--parallelism", str(concurrency), run_name="bench"))
        assert done.returncode == 0, done.stderr
        wall = time.perf_counter() - start
        results = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import pyarrow.parquet as pq,json,sys;print(json.dumps(pq.read_table(sys.argv[1]).to_pylist()))",
                    f"{out}/runs/bench/results.parquet",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
    return {"wall_s": wall, "samples": len(results), "mean_sample_s": statistics.fmean(r["duration_s"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--sandbox-only", action="store_true", help="only the hardened vs unhardened start + stop")
    parser.add_argument("--runtime-only", action="store_true", help="only the start + stop over the full runtime vs the host")
    parser.add_argument("--against", type=Path, help="with --sandbox-only: compare with this other checkout (with its .venv)")
    parser.add_argument("--imports", type=Path, metavar="OTHER_RUNTIME", help="only python_exec's document imports, this runtime vs OTHER_RUNTIME")
    args = parser.parse_args()
    if args.imports:
        print(json.dumps({"python_exec_document_imports": import_cost(args.imports, args.calls)}, indent=2))
        return
    if args.against:
        print(json.dumps({"sandbox_this_vs_other": tree_cost(args.against, args.starts, args.calls)}, indent=2))
        return
    report: dict[str, object] = {"sandbox_start_stop_runtime": runtime_cost(args.starts)}
    if args.runtime_only:
        print(json.dumps(report, indent=2))
        return
    report["sandbox_start_stop_hardening"] = hardening_cost(args.starts)
    if args.sandbox_only:
        print(json.dumps(report, indent=2))
        return
    for isolation in ("bwrap", "none"):
        report[f"tool_round_trip_{isolation}"] = round_trips(isolation, args.calls)
        report[f"sandbox_start_stop_{isolation}"] = sandbox_start_stop(isolation, args.starts)
    with tempfile.TemporaryDirectory() as tmp, start_background(host="127.0.0.1", port=0) as model:
        dataset = make_standin_dataset(SAMPLE, Path(tmp) / "dataset")
        for concurrency in (1, 4):
            report[f"run_12_tasks_c{concurrency}"] = full_run(dataset, model.base_url, concurrency)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""Local sandbox costs of two trees of the package side by side: start + stop (network off, network on,
with a reference file) and the tool-call round trip (calls spread over the plain starts), measured in turn by one worker process per tree,
so both see the same machine load. A tree is a git revision, exported to a temporary folder.

Usage: .venv/bin/python bench/sandbox_trees.py BEFORE [AFTER] [--starts 20] [--calls 200]
(AFTER defaults to the working tree). Prints JSON: per measure, each tree's p50 / mean / p95 and the
ratio AFTER / BEFORE.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from harness import summarize  # noqa: E402

# The worker: imports the package from argv[1], answers one JSON line of timings per request line.
WORKER = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from gdpval.sandbox.local import LocalSandbox
reference = Path(tempfile.mkdtemp()) / "book.xlsx"
reference.write_bytes(os.urandom(2 * 1024 * 1024))
os.chmod(reference.parent, 0o755); os.chmod(reference, 0o644)
for line in sys.stdin:
    kind, count = line.split()
    with tempfile.TemporaryDirectory() as tmp:
        refs = {"reference_files/ab12/book.xlsx": reference} if kind == "reference" else {}
        start = time.perf_counter()
        with LocalSandbox(Path(tmp) / "w", refs, isolation="bwrap", network=kind == "network") as box:
            client = box.client()
            client.wait_ready(30)
            ready = time.perf_counter()
            calls = []
            for _ in range(int(count)):
                began = time.perf_counter()
                client.call("bash", {"command": "true", "timeout": 10}, 10)
                calls.append(time.perf_counter() - began)
            left = time.perf_counter()
        stop = time.perf_counter() - left
    print(json.dumps({"start_stop": ready - start + stop, "calls": calls}), flush=True)
"""

MEASURES = ("plain", "network", "reference")


def export(rev: str, into: Path) -> Path:
    """The package of `rev`, exported from git (nothing of the repository's worktrees is touched)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "operator"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "operator"


def worker(package: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WORKER, str(package)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def ask(proc: subprocess.Popen, kind: str, calls: int) -> dict:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{kind} {calls}\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("before")
    parser.add_argument("after", nargs="?")
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp))}
        if args.after:
            (Path(tmp) / "after").mkdir()
            trees["after"] = export(args.after, Path(tmp) / "after")
        else:
            trees["after"] = ROOT / "operator"
        workers = {name: worker(package) for name, package in trees.items()}
        times: dict[str, dict[str, list[float]]] = {name: {m: [] for m in (*MEASURES, "tool_call")} for name in workers}
        for _ in range(args.starts):
            for kind in MEASURES:
                for name, proc in workers.items():
                    got = ask(proc, kind, max(1, args.calls // args.starts) if kind == "plain" else 0)
                    times[name][kind].append(got["start_stop"])
                    times[name]["tool_call"] += got["calls"]
        for proc in workers.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    report: dict[str, object] = {"before": args.before, "after": args.after or "working tree", "starts": args.starts, "calls": args.calls}
    for measure in (*MEASURES, "tool_call"):
        before, after = summarize(times["before"][measure]), summarize(times["after"][measure])
        ratios = {"ratio_p50": after["p50_ms"] / before["p50_ms"], "ratio_mean": after["mean_ms"] / before["mean_ms"]}
        report[measure] = {"before": before, "after": after, **ratios}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""The Go builds' CPU under different build settings (GOGC, compiler flags), side by side in one run.

On a fresh machine the Kubernetes build is the cluster tier's critical path, and the machine is
saturated throughout, so only less CPU work shortens it. The Go compiler spends part of its time
collecting garbage (a higher GOGC trades memory for it) and writing debug information that the
linker's -w then drops (-gcflags=all=-dwarf=false skips it). Each variant builds the same packages
of the Kubernetes release that hack/build-k8s.sh builds (its wrapper module, from the module cache)
into an empty build cache, rounds interleaved, and reports the children's CPU (user + sys), wall time
and the largest child's resident memory. A variant is a list of NAME=value environment settings and
-flags for `go build`:

    .venv/bin/python bench/go_build.py --variant GOGC=100 --variant GOGC=400 \
        --variant "GOGC=400 -gcflags=all=-dwarf=false" --rounds 2 --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from infra.paths import cache_dir, versions  # noqa: E402

# Packages deep in the apiserver's and client-go's trees: about six CPU-minutes cold on 2 cores.
PACKAGES = ("k8s.io/client-go/kubernetes", "k8s.io/kubernetes/pkg/apis/core/v1", "k8s.io/apiserver/pkg/server")


def split_variant(variant: str) -> tuple[dict[str, str], list[str]]:
    """`GOGC=400 '-gcflags=all=-N -l'` -> ({"GOGC": "400"}, ["-gcflags=all=-N -l"]): shell quoting groups a flag's words."""
    words = shlex.split(variant)
    flags = [word for word in words if word.startswith("-")]
    settings = dict(word.split("=", 1) for word in words if not word.startswith("-") and "=" in word)
    if len(flags) + len(settings) != len(words):
        raise SystemExit(f"variant {variant!r}: each word is NAME=value or a -flag of go build")
    return settings, flags


def build_once(src: Path, settings: dict[str, str], flags: list[str]) -> dict[str, float]:
    """One cold build of PACKAGES under a variant's settings and flags: the children's CPU seconds, wall seconds, max RSS (MiB)."""
    cache = Path(tempfile.mkdtemp(prefix="gocache-bench-"))
    base = {"GOGC": "100", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=mod"}
    env = {**os.environ, **base, **settings, "GOCACHE": str(cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    try:
        subprocess.run(["go", "build", "-trimpath", *flags, *PACKAGES], cwd=src, env=env, check=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "max_rss_mib": round(after.ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", help="settings and go build flags to compare (repeat); default GOGC=100 and GOGC=400")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = cache_dir() / "kubernetes" / versions()["K8S_VERSION"] / "src"
    if not (src / "go.mod").is_file():
        sys.exit(f"no Kubernetes wrapper module in {src}: run hack/build-k8s.sh once first")
    values = args.variant or ["GOGC=100", "GOGC=400"]
    parsed = {value: split_variant(value) for value in values}  # a malformed variant fails before any build
    runs: dict[str, list[dict[str, float]]] = {value: [] for value in values}
    for _ in range(args.rounds):
        for value in values:
            runs[value].append(build_once(src, *parsed[value]))
            print(f"{value}: {runs[value][-1]}", file=sys.stderr, flush=True)  # kept if a later build fails
    summary = {value: {key: round(statistics.median(run[key] for run in measured), 1) for key in measured[0]} for value, measured in runs.items()}
    baseline = summary[values[0]]["cpu_s"]
    for value in values:
        summary[value]["cpu_vs_first"] = round(summary[value]["cpu_s"] / baseline, 3)
    result = {"packages": PACKAGES, "rounds": args.rounds, "runs": runs, "median": summary}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for value in values:
            print(f"{value}: {summary[value]}")


if __name__ == "__main__":
    main()

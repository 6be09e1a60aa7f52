"""The two in-pod commands side by side, two trees, on this host: `gdpval stage` (whole process) and
`gdpval sample` (process start -> its first connection to the model), interleaved fresh processes.

What `bench/pod_startup.py` shows as the stage and agent steps of a sample pod, without the cluster:
one MinIO, the scripted model, a local tool server, a sample with `--references` files. The tree
before is a checkout's `operator/` folder, put first on PYTHONPATH (`git worktree add --detach /tmp/before REV`).

Usage: .venv/bin/python bench/pod_commands.py --before /tmp/before/operator [--rounds 10] [--references 15] --json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from gdpval.fakemodel.server import start_background  # noqa: E402
from gdpval.manifest import ReferenceFile  # noqa: E402
from gdpval.runner.prepare import save_or_resume  # noqa: E402
from gdpval.sandbox.client import SandboxClient  # noqa: E402
from gdpval.storage.s3 import S3Storage  # noqa: E402
from infra.minio import MinioServer  # noqa: E402
from support import runs  # noqa: E402
from support.cli import GDPVAL  # noqa: E402
from support.polling import wait_until  # noqa: E402

RUN = "r1"
# Runs the real entry point and prints the seconds from here to the first connect() to the model's port.
FIRST_CONNECTION = """
import os, socket, sys, time
start = time.perf_counter()
port = int(os.environ["BENCH_MODEL_PORT"])
connect = socket.socket.connect
def first(sock, address):
    if isinstance(address, tuple) and address[1] == port:
        print(round(time.perf_counter() - start, 4), flush=True)
        os._exit(0)
    return connect(sock, address)
socket.socket.connect = first
sys.argv = [sys.argv[1], *sys.argv[2:]]
exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"))
"""


def prepare(storage: S3Storage, references: int) -> str:
    """A run of one sample with `references` files of 200 kB; its sample id."""
    refs = []
    for i in range(references):
        key = f"datasets/d/reference_files/h{i}/f{i}.bin"
        storage.put_bytes(key, os.urandom(200_000))
        refs.append(ReferenceFile(path=f"reference_files/h{i}/f{i}.bin", key=key))
    (entry,) = runs.entries([runs.task("t1")])
    save_or_resume(storage, runs.record(RUN), [entry.model_copy(update={"references": refs})])
    return entry.sample.sample_id


def stage_seconds(env: dict[str, str], output: str, sample: str, dest: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, GDPVAL, "stage", "--run-name", RUN, "--output", output, "--sample", sample, "--dest", str(dest)],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def sample_seconds(env: dict[str, str], output: str, sample: str, sandbox: str) -> float:
    args = ["sample", "--run-name", RUN, "--output", output, "--sample", sample, "--attempt", "1", "--sandbox", sandbox]
    done = subprocess.run([sys.executable, "-c", FIRST_CONNECTION, GDPVAL, *args], env=env, check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def bench(args: argparse.Namespace, workdir: Path) -> dict:
    token = secrets.token_hex(16)
    tool_port = 17000 + secrets.randbelow(2000)
    with MinioServer(host="127.0.0.1") as s3, start_background() as model:
        bucket = s3.make_bucket()
        output = f"s3://{bucket}/gdpval"
        sample = prepare(S3Storage(bucket, "gdpval", s3.client()), args.references)
        toolserver = subprocess.Popen(
            [sys.executable, str(ROOT / "operator/gdpval/sandbox/toolserver.py"), "--listen", f"127.0.0.1:{tool_port}", "--workspace", str(workdir)],
            env={**os.environ, "GDPVAL_SANDBOX_TOKEN": token},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(SandboxClient(f"http://127.0.0.1:{tool_port}", token).healthy, 30, "the tool server", interval=0.1)
            base = {**os.environ, **s3.env(), "GDPVAL_SANDBOX_TOKEN": token, "OPENAI_BASE_URL": f"http://127.0.0.1:{model.port}/v1"}
            base["BENCH_MODEL_PORT"] = str(model.port)
            trees = {"before": args.before, "after": str(ROOT / "operator")}
            stage: dict[str, list[float]] = {name: [] for name in trees}
            first: dict[str, list[float]] = {name: [] for name in trees}
            for round_ in range(args.rounds):
                for name, tree in trees.items():
                    env = {**base, "PYTHONPATH": tree}
                    stage[name].append(stage_seconds(env, output, sample, workdir / f"refs-{name}-{round_}"))
                    first[name].append(sample_seconds(env, output, sample, f"http://127.0.0.1:{tool_port}"))
        finally:
            toolserver.terminate()
            toolserver.wait()
    return {
        "rounds": args.rounds,
        "references": args.references,
        "stage_median_s": {name: round(statistics.median(v), 3) for name, v in stage.items()},
        "sample_to_first_model_connection_median_s": {name: round(statistics.median(v), 3) for name, v in first.items()},
        "trees": trees,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the operator/ folder of the tree to compare with")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--references", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdpval-bench-commands-") as tmp:
        report = bench(args, Path(tmp))
    print(json.dumps(report, indent=2) if args.json else report)


if __name__ == "__main__":
    main()

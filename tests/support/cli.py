"""The `gdpval` command as tests and benchmarks run it (a real subprocess of this venv's entry point),
and the official submission layout written out independently of the package's own constant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GDPVAL = str(Path(sys.executable).with_name("gdpval"))

# The columns of OpenAI's submission parquet, in order.
SUBMISSION_COLUMNS = [
    "task_id",
    "sector",
    "occupation",
    "prompt",
    "reference_files",
    "reference_file_urls",
    "reference_file_hf_uris",
    "rubric_pretty",
    "rubric_json",
    "deliverable_text",
    "deliverable_files",
]


def gdpval(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([GDPVAL, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


def run_args(dataset: Path, base_url: str, output: str | Path, *extra: str, run_name: str = "t") -> list[str]:
    """`gdpval run` of the scripted model over a dataset folder, four samples at once."""
    return ["run", "--dataset", str(dataset), "--model", "scripted", "--base-url", base_url, "--output", str(output), "--run-name", run_name,
            "--parallelism", "4", *extra]  # fmt: skip

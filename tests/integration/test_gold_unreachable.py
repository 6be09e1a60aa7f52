"""The gold stays the judge's: after the pairwise judge mirrored it into the run's storage root, a sample whose
model searches the sandbox's whole file system (every name, every readable file's bytes and zip members) and
tries every address the run knows finds none of it. The same search on the host over the storage root finds
it: the search can fail. Everything real: `gdpval run` in bubblewrap sandboxes, the scripted model over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import pytest

from gdpval.dataset.loader import load_dataset
from gdpval.fakemodel.server import start_background
from gdpval.sandbox import bwrap_status
from gdpval.storage import layout
from support import stress
from support.cli import gdpval, run_args
from support.gold_search import PREFIX, found, search_code, tool_outputs

TASKS = 2


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return stress.make_stress_dataset(tmp_path_factory.mktemp("gold") / "current", "current")


def test_a_sandbox_searching_everything_finds_no_gold_the_judge_mirrored(dataset, scripted_model, tmp_path):
    usable, why = bwrap_status()
    if not usable:
        pytest.skip(f"bubblewrap unusable ({why}): without a sandbox nothing is isolated to test")
    out = tmp_path / "out"
    first = gdpval(*run_args(dataset, scripted_model.base_url, out, "--limit", str(TASKS), run_name="first"))
    assert first.returncode == 0, first.stderr[-2000:]
    with start_background(model="judge") as judge:
        judged = gdpval("judge", "--method", "pairwise", "--output", str(out), "--run-name", "first", "--judge-model", "judge",
                        "--judge-base-url", judge.base_url, "--cache-dir", str(tmp_path / "cache"))  # fmt: skip
    assert judged.returncode == 0, judged.stderr[-2000:]
    loaded = load_dataset(str(dataset), revision=None, cache_dir=tmp_path / "cache")
    gold_names = sorted({PurePosixPath(p).name for t in loaded.tasks[:TASKS] for p in loaded.gold[t.task_id]})
    mirrored = out / layout.judge_only(loaded.ref.key)
    assert gold_names and all(list(mirrored.rglob(name)) for name in gold_names)

    model = urlparse(scripted_model.base_url)
    addresses = [(model.hostname, model.port), ("127.0.0.1", model.port)]
    code = search_code(addresses, [scripted_model.base_url + "/models"], gold_names)
    control = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120)
    seen_on_host = json.loads(control.stdout.split(PREFIX, 1)[1])
    assert seen_on_host["hits"] and seen_on_host["names"]  # on the host, the same search finds the mirrored gold

    find = "find / \\( -path /proc -o -path /sys \\) -prune -o \\( " + " -o ".join(f"-name {json.dumps(n)}" for n in gold_names) + " \\) -print"
    script = [{"bash": f"{find} 2>/dev/null; echo FIND-DONE"}, {"python_exec": code}]
    hunt = gdpval(*run_args(dataset, scripted_model.base_url, out, "--limit", str(TASKS), "--extra-body", json.dumps({"fake_script": script}),
                            run_name="hunt"))  # fmt: skip
    assert hunt.returncode == 0, hunt.stderr[-2000:]
    transcripts = sorted((out / layout.samples("hunt")).glob("*/attempt-*/transcript.jsonl"))
    assert len(transcripts) == TASKS
    for transcript in transcripts:
        text = transcript.read_text()
        report = found(text)
        assert report["read"] > 1000 and report["hits"] == [] and report["names"] == [] and report["answered"] == report["fetched"] == [], report
        outputs = tool_outputs(text, "bash")
        assert len(outputs) == 1 and "FIND-DONE" in outputs[0] and not any(name in outputs[0] for name in gold_names), outputs

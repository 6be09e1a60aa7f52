"""The `view` tool end to end: `gdpval run --view-images` in the full runtime, where the scripted model
builds a pptx, views it, and reports the pictures its next request carried (a vision request whose PNG
pages decode whole); run.json and the transcript record it. Without the flag the tool is not offered."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gdpval.fakemodel.model import SCRIPT_BODY_FIELD
from gdpval.sandbox import runtime
from support.cli import gdpval, run_args
from support.office_task import BUILD_PPTX

DECK = "deliverable_files/deck.pptx"


def scripted_run(dataset: Path, model_url: str, output: Path, *flags: str) -> tuple[dict, dict, list[dict]]:
    """(run.json, the sample's result, its transcript events) of one scripted sample: build the deck, view it."""
    steps = [{"python_exec": BUILD_PPTX}, {"view": DECK}]
    extra = ["--limit", "1", "--isolation", "bwrap", "--sandbox-runtime", "full", "--extra-body", json.dumps({SCRIPT_BODY_FIELD: steps}), *flags]
    done = gdpval(*run_args(dataset, model_url, output, *extra), timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result,) = output.glob("runs/t/samples/*/attempt-1/result.json")
    events = [json.loads(line) for line in (result.parent / "transcript.jsonl").read_text().splitlines()]
    return json.loads((output / "runs/t/run.json").read_text()), json.loads(result.read_text()), events


def test_a_viewed_deck_reaches_the_model_as_pictures(standin_dataset, scripted_model, tmp_path):
    full = runtime.current()
    assert full is not None and full.info is not None, f"no full runtime in {runtime.runtimes_dir()}: {runtime.BUILD_IT}"
    record, result, events = scripted_run(standin_dataset, scripted_model.base_url, tmp_path / "out", "--view-images")
    assert record["settings"]["agent"]["viewImages"] is True
    assert "view" in events[0]["tools"]
    viewed = [e["content"] for e in events if e["event"] == "tool_result"][1]
    assert viewed.startswith(f"{DECK}: presentation (1 slide); 1 picture(s)"), viewed
    assert "Quarterly revenue" in viewed
    (shown,) = [e for e in events if e["event"] == "pictures"]
    assert shown["files"] == [DECK] and shown["bytes"][0] > 1000
    seen = re.search(r"Pictures seen: 1 \(PNG (\d+)x(\d+)\)\.", result["deliverable_text"])
    assert seen and max(int(seen[1]), int(seen[2])) == 1024, result["deliverable_text"]  # a slide at the judge's size


def test_without_the_flag_view_is_not_offered(standin_dataset, scripted_model, tmp_path):
    record, result, events = scripted_run(standin_dataset, scripted_model.base_url, tmp_path / "out")
    assert record["settings"]["agent"]["viewImages"] is False
    assert "view" not in events[0]["tools"]
    assert [e["content"] for e in events if e["event"] == "tool_result"][1].startswith("error: unknown tool 'view'")
    assert "Pictures seen" not in result["deliverable_text"]

"""One task per deliverable format family (docx, xlsx, pptx, pdf, image, audio, video, CAD, geodata,
charts) runs through `gdpval run` on the full runtime with the scripted model: the model's python_exec
makes the deliverable with the paper's packages and reads it back, and the run commits the files.

The full runtime is the one `hack/setup.sh --test` unpacks; without it every test fails with what to run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gdpval.fakemodel.model import SCRIPT_BODY_FIELD
from gdpval.storage import layout
from support.attacks import Run
from support.cli import gdpval, run_args
from support.format_tasks import DONE, FAMILIES
from support.sandbox_full import local_runtime

pytestmark = pytest.mark.slow


def committed(output: Path) -> dict[str, bytes]:
    (result,) = output.glob("runs/t/samples/*/attempt-1/result.json")
    folder = output / layout.deliverables("t", result.parent.parent.name, 1)
    return {path.name: path.read_bytes() for path in folder.iterdir()} if folder.is_dir() else {}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_task_of_the_family_runs_on_the_full_runtime(standin_dataset, scripted_model, tmp_path, family: str) -> None:
    local_runtime()  # this tree's image, unpacked: else fail with what to run
    script, files = FAMILIES[family]
    steps = [{"python_exec": script}]
    extra = ["--limit", "1", "--isolation", "bwrap", "--sandbox-runtime", "full", "--extra-body", json.dumps({SCRIPT_BODY_FIELD: steps})]
    done = gdpval(*run_args(standin_dataset, scripted_model.base_url, tmp_path / "out", *extra), timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (result,) = Run(done.returncode, done.stdout, done.stderr, tmp_path / "out").tool_results()
    assert DONE in result, result[-3000:]
    made = committed(tmp_path / "out")
    assert sorted(made) == sorted(files), sorted(made)
    for name, magic in files.items():
        assert magic in made[name][:16], (name, made[name][:16])

"""The `view` tool's renderer run through a real sandbox's python_exec (the host runtime, bubblewrap,
whose python has no imaging library: text files, no pictures): its answer, nothing left in the
workspace, a missing file said plainly, and a link put in place of its folder not followed by the
harness. Pictures through the full runtime: tests/images/test_view_run.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gdpval.runner.viewer import VIEW_FOLDER, SandboxViewer
from gdpval.sandbox import LocalSandbox


def test_the_renderer_runs_in_the_sample_sandbox_and_leaves_nothing_behind(tmp_path: Path) -> None:
    with LocalSandbox(tmp_path / "ws", {}, isolation="bwrap") as box:
        (box.host_workspace / "deliverable_files" / "notes.md").write_text("# Findings 結果\n\nrevenue rose")
        viewer = SandboxViewer(box.client(), box.host_workspace)
        looked = viewer.view("deliverable_files/notes.md", 60)
        assert looked.text.startswith("deliverable_files/notes.md: text; no pictures: a text file has none here."), looked.text
        assert "# Findings 結果" in looked.text and not looked.images
        assert not (box.host_workspace / VIEW_FOLDER).exists()
        missing = viewer.view("deliverable_files/none.pdf", 60)
        assert missing.text.startswith("error: deliverable_files/none.pdf could not be rendered") and "no such file" in missing.text
        assert not missing.images


def test_a_link_left_in_place_of_the_view_folder_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "view.json").write_text(json.dumps({"kind": "image", "text": "host secret", "images": [], "facts": {}, "unrenderable": ""}))
    with LocalSandbox(tmp_path / "ws", {}, isolation="bwrap") as box:
        (box.host_workspace / "a.txt").write_text("the model's own text")
        tools = box.client()

        class Racing:
            """The model's background process swaps the folder for a link to a host path once the worker is done."""

            def call(self, tool, arguments, timeout):
                out = tools.call(tool, arguments, timeout)
                if tool == "python_exec":
                    subprocess.run(["rm", "-rf", str(box.host_workspace / VIEW_FOLDER)], check=True)
                    (box.host_workspace / VIEW_FOLDER).symlink_to(secret)
                return out

        looked = SandboxViewer(Racing(), box.host_workspace).view("a.txt", 60)
    assert "host secret" not in looked.text and looked.text.startswith("error: a.txt could not be rendered"), looked.text

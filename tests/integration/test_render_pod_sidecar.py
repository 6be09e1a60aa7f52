"""The judge pod's way of rendering, with a real tool server on loopback standing in for its sidecar: the judge copies
the file and the worker into the shared folder, the worker runs through the server, the result is read back and
the judge's folder in it is removed; a server that refuses the judge's token makes the file unrenderable, never a stub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gdpval.render import child
from gdpval.render.limits import RenderLimits
from gdpval.sandbox import toolserver

IMAGE = "localhost/gdpval-sandbox:test"


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[child.PodSandbox]:
    with serving(tmp_path, f"{Path(sys.executable).parent}:{os.environ['PATH']}") as pod:  # `python3` in commands: this interpreter
        yield pod


@contextmanager
def serving(tmp_path: Path, path: str) -> Iterator[child.PodSandbox]:
    shared, token = tmp_path / "render", tmp_path / "token"
    shared.mkdir()
    token.write_text("pod-made-token\n")
    argv = [sys.executable, toolserver.__file__, "--listen", "127.0.0.1:0", "--workspace", str(shared), "--token-file", str(token)]
    proc = subprocess.Popen(argv, env={"PATH": path}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        address = json.loads(proc.stdout.readline())["listening"]
        yield child.PodSandbox(address, token, shared, IMAGE)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_file_is_rendered_through_the_sidecar_and_the_judges_folder_is_removed(tmp_path, sidecar):
    source = tmp_path / "notes.md"
    source.write_text("# Quarterly plan\n\nRevenue grows 4 %.\n")
    view = child.run_worker(source, ".md", "notes.md", RenderLimits(), sidecar)
    assert not view.unrenderable and "Revenue grows 4 %." in view.text and view.kind == "text"
    assert view.renderer == f"pod sidecar of image {IMAGE}"
    assert list(sidecar.shared.glob("gdpval-render-*")) == []  # (the tool server makes its own deliverable_files/)


def test_a_sidecar_that_refuses_the_token_leaves_the_file_unrenderable(tmp_path, sidecar):
    source = tmp_path / "notes.md"
    source.write_text("text")
    sidecar.token_file.write_text("not-the-token")
    with pytest.raises(child.LimitBroken, match="render sidecar failed: sandbox refused bash: 401"):
        child.run_worker(source, ".md", "notes.md", RenderLimits(), sidecar)


def test_the_sidecar_is_asked_once_whether_its_image_has_libreoffice(tmp_path):
    """A sidecar image without soffice on its PATH (slim) is text only; one with it (full) is used."""
    bare, full = tmp_path / "bare", tmp_path / "full"
    (full / "bin").mkdir(parents=True)
    bare.mkdir()
    soffice = full / "bin" / "soffice"
    soffice.write_text("#!/bin/sh\n")
    soffice.chmod(0o755)
    with serving(bare, "/usr/bin:/bin") as slim:
        assert child.has_office(slim) is False
    with serving(full, f"{full / 'bin'}:/usr/bin:/bin") as office:
        assert child.has_office(office) is True

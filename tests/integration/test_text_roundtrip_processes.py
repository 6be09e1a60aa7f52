"""Arbitrary text through the paths that cross a process: `gdpval run`'s command line (bytes that are
not UTF-8 are refused in one line) and an image unpacked by `tar` into a runtime (runtime.json and the
runtime label a run records). The in-process paths are in tests/unit/test_text_roundtrip.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given

from gdpval.manifest import RunRecord
from gdpval.sandbox import runtime
from gdpval.storage import layout
from gdpval.storage.local import LocalStorage
from gdpval.submission.build import build_submission
from support import runs
from support.text import NAME, PROFILE, TEXT


@pytest.fixture
def storage(tmp_path) -> LocalStorage:
    return LocalStorage(tmp_path / "out")


@PROFILE
@given(text=TEXT, name=NAME.filter(lambda s: "\x00" not in s and "=" not in s))
def test_runtime_json_and_the_runtime_a_run_records(storage, tmp_path, text, name):
    """runtime.json as `gdpval runtime build` writes it beside an unpacked root (the image's reference
    and environment) and `gdpval run` reads it; the runtime label in run.json and submission_info.json."""
    image = tmp_path / "image"
    (image / "usr/bin").mkdir(parents=True, exist_ok=True)
    (image / "usr/bin/python3").touch()
    digest = "sha256:" + hashlib.sha256(json.dumps([text, name]).encode()).hexdigest()
    made, _ = runtime.unpack(text, digest, {name: text, "PATH": "/usr/bin"}, ["tar", "-c", "-C", str(image), "."], tmp_path / "runtimes")
    assert made.root is not None and runtime.load(made.root.parent) == made
    assert made.info is not None and made.info.image == text and made.env[name] == text
    label = runtime.Runtime(root=tmp_path / name.replace("/", "_") / "rootfs").label
    storage.put_text(layout.run_json("r"), runs.record("r").model_copy(update={"runtime": label}).dump())
    storage.put_text(layout.manifest("r"), "")
    assert RunRecord.model_validate_json(storage.get_text(layout.run_json("r"))).runtime == label
    build_submission(storage, "r")
    (info,) = [key for key in storage.list(layout.submission("r")) if key.endswith("submission_info.json")]
    assert json.loads(storage.get_text(info))["runtime"] == label


@pytest.mark.parametrize("flag", ["--model", "--system-prompt", "--sector"])
def test_settings_that_are_not_utf8_are_refused_in_one_line(flag, tmp_path):
    """Bytes that are not UTF-8 on the command line arrive as lone surrogates; the run refuses them before writing run.json."""
    gdpval = str(Path(sys.executable).with_name("gdpval"))
    argv = [
        gdpval,
        "run",
        "--dataset",
        str(tmp_path),
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--output",
        str(tmp_path / "out"),
        flag,
        "bad\udcff",
    ]
    done = subprocess.run([os.fsencode(a) for a in argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and flag in done.stderr, done.stderr
    assert not list(tmp_path.rglob("run.json"))

"""The local sandbox runtime: which root a setting names, how an image is unpacked (atomically, once per
digest), the bubblewrap binds over it, what `gdpval run` records and says. Images here are small tar
streams made on the spot; the real image is exercised by tests/images and tests/integration."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gdpval.dataset.models import DatasetRef
from gdpval.errors import GdpvalError
from gdpval.fakemodel.model import FakeModelConfig
from gdpval.manifest import RunRecord
from gdpval.runner.local import choose_runtime, runtime_notes
from gdpval.sandbox import runtime
from gdpval.sandbox.runtime import Runtime, RuntimeInfo
from gdpval.settings import RunSettings
from support import runs

SCRIPTED = FakeModelConfig.model
DIGEST = "sha256:" + "ab" * 32
ENV = {"PATH": "/opt/venv/bin:/usr/bin", "LANG": "C.UTF-8"}


def make_image(root: Path) -> Path:
    """A tiny root: a venv python first on PATH, a merged-/usr link, folders the sandbox brings itself."""
    for folder in ("usr/bin", "opt/venv/bin", "etc", "proc", "tmp", "workspace", "reference_files"):
        (root / folder).mkdir(parents=True)
    (root / "usr/bin/python3").write_text("#!")
    (root / "opt/venv/bin/python3").symlink_to("/usr/bin/python3")
    (root / "bin").symlink_to("usr/bin")
    (root / "etc/passwd").write_text("sandbox:x:1000:1000::/home/sandbox:/bin/bash\n")
    return root


def tar_of(root: Path) -> list[str]:
    return ["tar", "-c", "-C", str(root), "."]


def test_host_and_auto_without_a_runtime_are_the_host(tmp_path):
    assert runtime.resolve("host", tmp_path) == Runtime()
    assert runtime.resolve("auto", tmp_path).label == "host"
    with pytest.raises(GdpvalError, match="gdpval runtime build"):
        runtime.resolve("full", tmp_path)
    with pytest.raises(GdpvalError, match="not auto, full, host or an existing folder"):
        runtime.resolve(str(tmp_path / "nowhere"), tmp_path)
    with pytest.raises(GdpvalError, match="neither a runtime folder"):
        runtime.resolve(str(tmp_path), tmp_path)


def test_unpack_once_per_digest_and_auto_picks_it(tmp_path):
    image = make_image(tmp_path / "image")
    base = tmp_path / "runtimes"
    found, made = runtime.unpack("localhost/sandbox:full-1", DIGEST, ENV, tar_of(image), base)
    assert made and found.label == DIGEST and found.python == "/opt/venv/bin/python3"
    assert found.root == base / f"sha256-{'ab' * 32}" / "rootfs"
    assert (found.root / "etc/passwd").read_text().startswith("sandbox:")
    assert found.env == ENV and found.info is not None and found.info.size_bytes > 0
    assert runtime.resolve("auto", base) == found == runtime.resolve("full", base)
    assert runtime.resolve(str(found.root.parent), base) == found
    again, made = runtime.unpack("localhost/sandbox:full-1", DIGEST, ENV, ["false"], base)  # never runs the export
    assert not made and again == found
    (row,) = runtime.listing(base)
    assert row["current"] and row["digest"] == DIGEST


def test_a_failed_unpack_leaves_nothing_a_run_would_use(tmp_path):
    image = make_image(tmp_path / "image")
    base = tmp_path / "runtimes"
    broken = ["sh", "-c", f"tar -c -C {image} . ; echo export died >&2; exit 3"]
    with pytest.raises(GdpvalError, match="export died"):
        runtime.unpack("img", DIGEST, ENV, broken, base)
    assert runtime.current(base) is None and runtime.resolve("auto", base).label == "host"
    assert not (base / f"sha256-{'ab' * 32}").exists()
    leftovers = list(base.glob(".partial-*"))
    assert leftovers  # what a crash leaves: a folder no run ever picks ...
    runtime.unpack("img", DIGEST, ENV, tar_of(image), base)
    assert not any(path.exists() for path in leftovers)  # ... removed by the next unpack


def test_a_new_image_moves_current_and_keeps_the_old_one_usable(tmp_path):
    image = make_image(tmp_path / "image")
    base = tmp_path / "runtimes"
    old, _ = runtime.unpack("img:1", DIGEST, ENV, tar_of(image), base)
    new, _ = runtime.unpack("img:2", "sha256:" + "cd" * 32, ENV, tar_of(image), base)
    assert runtime.resolve("auto", base) == new and old.root is not None
    assert runtime.resolve(str(old.root.parent), base) == old
    assert [row["current"] for row in runtime.listing(base)] == [False, True]
    assert runtime.prune(base) == [old.root.parent]
    assert not old.root.parent.exists() and runtime.resolve("auto", base) == new
    assert [row["current"] for row in runtime.listing(base)] == [True] and runtime.prune(base) == []


def test_a_bare_root_folder_is_a_runtime_without_a_digest(tmp_path):
    root = make_image(tmp_path / "root")
    found = runtime.resolve(str(root))
    assert found.root == root and found.label == f"root:{root}" and found.python == "/usr/bin/python3"


def test_image_binds_are_read_only_and_leave_out_what_the_sandbox_makes(tmp_path):
    root = make_image(tmp_path / "root")
    args = runtime.root_binds(Runtime(root=root))
    pairs = [(args[i], args[i + 1], args[i + 2]) for i in range(0, len(args), 3)]
    assert all(source.startswith(str(root)) for kind, source, _ in pairs if kind == "--ro-bind")  # nothing of the host's
    assert ("--symlink", "usr/bin", "/bin") in pairs
    assert ("--ro-bind", str(root / "usr"), "/usr") in pairs and ("--ro-bind", str(root / "etc"), "/etc") in pairs
    assert {kind for kind, _, _ in pairs} == {"--ro-bind", "--symlink"}
    assert not {dest for _, _, dest in pairs} & {"/proc", "/tmp", "/workspace", "/reference_files"}


def test_host_binds_are_the_hosts_system_folders():
    args = runtime.root_binds(Runtime())
    assert args[:6] == ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]


def stored(runtime_label: str | None, model: str = "scripted") -> RunRecord:
    return runs.record("r", model=model).model_copy(update={"runtime": runtime_label})


def full() -> Runtime:
    return Runtime(root=Path("/r/rootfs"), info=RuntimeInfo(image="img", digest=DIGEST))


def test_run_says_its_runtime_and_warns_a_real_model_on_the_host():
    (line,) = runtime_notes(stored(DIGEST, model="gpt-x"), full(), SCRIPTED)
    assert DIGEST in line and "img" in line
    line, warning = runtime_notes(stored("host", model="gpt-x"), Runtime(), SCRIPTED)
    assert line.startswith("sandbox runtime: host") and "not comparable with pod runs" in warning and "gdpval runtime build" in warning
    assert len(runtime_notes(stored("host"), Runtime(), SCRIPTED)) == 1  # the scripted model uses no office tools


def test_a_resume_refuses_another_runtime_than_the_runs():
    with pytest.raises(GdpvalError, match=f"ran its samples in runtime host, not {DIGEST}"):
        runtime_notes(stored("host"), full(), SCRIPTED)
    assert runtime_notes(stored(None), full(), SCRIPTED)  # a run.json from before runtimes were recorded


def test_old_run_json_reads_without_a_runtime(tmp_path):
    text = runs.record("r").dump()
    assert "runtime" not in json.loads(text) or json.loads(text)["runtime"] is None
    data = json.loads(text)
    data.pop("runtime", None)
    assert RunRecord.model_validate(data).runtime is None


def test_the_runtime_setting_never_reaches_run_json_but_its_resolution_does():
    settings = RunSettings.model_validate({"model": {"name": "m"}, "sandbox": {"runtime": "/somewhere"}})
    record = RunRecord(run_name="r", settings=settings, dataset=DatasetRef(source="s3", location="s3://d", revision="x"), runtime=DIGEST)
    data = json.loads(record.dump())
    assert "runtime" not in data["settings"]["sandbox"] and data["runtime"] == DIGEST


def test_unpacked_folders_are_readable_by_other_users(tmp_path):
    """A run as another user (or the sandbox's uid 1000) must read the root a root-owned build made."""
    image = make_image(tmp_path / "image")
    found, _ = runtime.unpack("img", DIGEST, ENV, tar_of(image), tmp_path / "runtimes")
    assert found.root is not None and os.stat(found.root.parent).st_mode & 0o005 == 0o005


def test_without_bubblewrap_auto_is_the_host_and_a_root_is_refused():
    for choice in ("auto", "host"):
        record, system = choose_runtime(stored(None).model_copy(update={"settings": with_runtime(choice)}), "none")
        assert system == Runtime() and record.runtime == "host"
    with pytest.raises(GdpvalError, match="needs bubblewrap isolation"):
        choose_runtime(stored(None).model_copy(update={"settings": with_runtime("full")}), "none")


def with_runtime(choice: str) -> RunSettings:
    return RunSettings.model_validate({"model": {"name": "m"}, "sandbox": {"runtime": choice}})

"""A root runner's sandbox is not host root: its processes run as an unprivileged host uid (GDPVAL_SANDBOX_UID,
default 65533), so plain file permissions hold. Through `gdpval run` as root on the host runtime, the model
cannot read /etc/shadow or /etc/gshadow and the task still succeeds (the full runtime's twin waits for its
build in tests/images); on a LocalSandbox, a root-owned folder bound writable into the sandbox refuses
writes and hides its root-only file."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdpval.sandbox import LocalSandbox, view
from gdpval.sandbox.launch import DEFAULT_OWNER, OWNER_ENV, SandboxOwnerError, bwrap_status
from gdpval.sandbox.limits import OWNER_FILE
from support.attacks import READ_ROOT_ONLY, assert_root_only_files_refused


def host_uid(pid: int) -> int:
    (line,) = [line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
    return int(line.split()[2])


def test_root_only_host_files_are_refused_and_the_task_succeeds(run_script) -> None:
    run = run_script([{"bash": READ_ROOT_ONLY}], 0)
    assert "sandbox runtime: host" in run.stderr
    assert_root_only_files_refused(run)


def lock_a_folder(workspace: Path) -> None:
    """Put a root-owned folder holding a root-only file into a started sandbox's workspace (its disk is mounted by then)."""
    (workspace / "locked").mkdir()
    (workspace / "locked").chmod(0o755)
    secret = workspace / "locked" / "secret.txt"
    secret.write_text("root only")
    secret.chmod(0o600)


def bash(box: LocalSandbox, command: str) -> str:
    return box.client().call("bash", {"command": command}, timeout=20).output


@pytest.fixture
def owner_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    monkeypatch.delenv(OWNER_ENV, raising=False)
    yield monkeypatch


def test_a_root_owned_folder_bound_writable_refuses_writes(tmp_path: Path, owner_env) -> None:
    assert os.geteuid() == 0 and bwrap_status()[0], bwrap_status()[1]
    with LocalSandbox(tmp_path / "workspace", {}, isolation="bwrap") as box:
        lock_a_folder(box.workspace)
        assert box.pid is not None and host_uid(box.pid) == DEFAULT_OWNER
        out = bash(box, "touch locked/new; echo touch=$?; cat locked/secret.txt; echo cat=$?; rm locked/secret.txt; echo rm=$?; echo ok > mine.txt")
        assert "touch=1" in out and "cat=1" in out and "rm=1" in out and "root only" not in out, out
        assert "Permission denied" in out, out
        assert (box.workspace / "mine.txt").stat().st_uid == DEFAULT_OWNER
        assert (box.workspace / "locked" / "secret.txt").read_text() == "root only"
        assert not (box.workspace / "locked" / "new").exists()


def test_the_sandbox_owner_is_overridable(tmp_path: Path, owner_env) -> None:
    owner_env.setenv(OWNER_ENV, "64123:64124")
    with LocalSandbox(tmp_path / "workspace", {}, isolation="bwrap") as box:
        bash(box, "echo ok > mine.txt")
        made = (box.workspace / "mine.txt").stat()
        assert (made.st_uid, made.st_gid) == (64123, 64124)


def test_a_bad_sandbox_owner_is_refused_with_what_to_set(tmp_path: Path, owner_env) -> None:
    owner_env.setenv(OWNER_ENV, "0")
    with pytest.raises(SandboxOwnerError, match=f"{OWNER_ENV}='0'.*uid:gid"):
        LocalSandbox(tmp_path / "workspace", {}, isolation="bwrap")


def test_a_root_only_reference_is_readable_inside_and_copied_nowhere_on_the_host(tmp_path: Path, owner_env) -> None:
    """A reference the dropped uid could not read reaches the sandbox through a descriptor root opened; no other
    account gets a copy on the host, and the original is untouched."""
    folder = tmp_path / "prïvate\u2028\u202e\udcff"  # host paths of any text reach bubblewrap through the view
    folder.mkdir()
    private, shared = folder / "ref\u2029.txt", folder / "shared ü.txt"
    for reference, mode in ((private, 0o600), (shared, 0o644)):
        reference.write_text(f"text of {reference.name}")
        reference.chmod(mode)
    references = {"reference_files/ab12/private.txt": private, "reference_files/ab12/shared ü.txt": shared}
    with LocalSandbox(folder / "wörk\u2028space", references, isolation="bwrap") as box:
        out = bash(box, "cat /reference_files/ab12/*; echo; echo more >> /reference_files/ab12/private.txt; echo append=$?")
        assert out.startswith(f"text of {private.name}text of {shared.name}") and "append=1" in out, out
        assert box._view is not None and {path.name for path in box._view.path.iterdir()} == {OWNER_FILE, "workspace"}
    assert private.read_text() == f"text of {private.name}" and private.stat().st_mode & 0o777 == 0o600


def test_a_killed_runners_view_is_removed(tmp_path: Path, owner_env) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = Path(tempfile.mkdtemp(prefix=view.VIEW_PREFIX, dir=view.VIEW_BASE))
    (orphan / OWNER_FILE).write_text(str(dead.pid))
    view.remove_orphan_views.cache_clear()
    with LocalSandbox(tmp_path / "workspace", {}, isolation="bwrap") as box:
        assert box._view is not None
        folder = box._view.path
        assert not orphan.exists() and folder.exists()
    assert not folder.exists()

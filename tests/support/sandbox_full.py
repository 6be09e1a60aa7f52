"""Where the full sandbox image's tests run: podman with the image this tree builds, and the local
runtime unpacked from it. A missing podman, image or runtime fails with what to run, never skips."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from gdpval.sandbox import runtime
from gdpval.sandbox.local import LocalSandbox
from infra.paths import REPO_ROOT

BUILD = REPO_ROOT / "images" / "sandbox" / "build.sh"
BUILD_IT = "run images/sandbox/build.sh (hack/setup.sh --test does; see images/sandbox/README.md for how long)"
UNPACK_IT = "run `gdpval runtime build` (hack/setup.sh --test does, once the image is built)"


def podman() -> list[str]:
    exe = shutil.which("podman")
    if exe is None:
        pytest.fail(f"podman is not installed: run hack/setup.sh --test, then {BUILD_IT}")
    runc = shutil.which("runc")
    # crun refuses this machine's hybrid cgroup layout; hack/images.sh uses runc the same way.
    return [exe, "--log-level=error", *(["--runtime", runc] if runc else []), "--cgroup-manager=cgroupfs"]


def image(flavour: str = "full") -> str:
    """$GDPVAL_SANDBOX_FULL_IMAGE (for `full`), or the image of the flavour this tree's Dockerfile,
    locks and tool server build."""
    if flavour == "full" and os.environ.get("GDPVAL_SANDBOX_FULL_IMAGE"):
        return os.environ["GDPVAL_SANDBOX_FULL_IMAGE"]
    tag = subprocess.run(["bash", str(BUILD), "tag", flavour], capture_output=True, text=True)
    assert tag.returncode == 0, f"cannot name the {flavour} sandbox image: {tag.stderr.strip()}"
    return tag.stdout.strip()


def local_runtime() -> runtime.Runtime:
    """The runtime unpacked from the image this tree builds (not merely some older one)."""
    found = runtime.current()
    if found is None or found.info is None:
        pytest.fail(f"no local runtime in {runtime.runtimes_dir()}: {UNPACK_IT}")
    wanted = image()
    assert found.info.image == wanted, f"the local runtime is {found.info.image}, not this tree's {wanted}: {UNPACK_IT}"
    return found


def python_in_podman(script: str, args: list[str], timeout: float, ref: str | None = None) -> str:
    """Run a Python script in the image (this tree's full one by default; uid 1000, no network) and
    return its output; it must exit 0."""
    base = podman()
    ref = ref or image()
    if subprocess.run([*base, "image", "exists", ref]).returncode != 0:
        pytest.fail(f"the full sandbox image {ref} is not built: {BUILD_IT}")
    # Explicit, modest rlimits: the ones podman picks by itself are refused on this VM.
    limits = ["--ulimit", "nofile=16384:16384", "--ulimit", "nproc=16384:16384"]
    proc = subprocess.run(
        [*base, "run", "--rm", "--network=none", *limits, ref, "python3", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def python_in_local_runtime(script: str, args: list[str], workspace: Path, timeout: float, system: runtime.Runtime | None = None) -> str:
    """Run a Python script through the tool server of a hardened bubblewrap sandbox over a runtime
    (this tree's full one by default)."""
    with LocalSandbox(workspace, {}, isolation="bwrap", system=system or local_runtime()) as box:
        (workspace / "script.py").write_text(script)
        if box.owner is not None:  # a root runner's sandbox runs as its own host uid
            os.chown(workspace / "script.py", *box.owner)
        done = box.client().call("bash", {"command": shlex.join(["python3", "script.py", *args])}, timeout)
        assert done.exit_code == 0 and not done.timed_out, done.output[-3000:]
        return done.output

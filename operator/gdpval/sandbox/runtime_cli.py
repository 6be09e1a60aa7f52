"""`gdpval runtime build|show`: make the full sandbox image's root available to local runs.

Building needs podman (and, without --image, this checkout's images/sandbox/build.sh); running does
not: `gdpval run` only reads the unpacked folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from gdpval.errors import GdpvalError
from gdpval.sandbox import runtime

runtime_app = typer.Typer(no_args_is_help=True, help="The full sandbox image as a local runtime (build, show, prune).")

BUILD_SCRIPT = Path(__file__).resolve().parents[3] / "images" / "sandbox" / "build.sh"


def podman() -> list[str]:
    exe = shutil.which("podman")
    if exe is None:
        raise GdpvalError("podman is needed to build the runtime (not to use it): install podman, or run hack/setup.sh --test")
    runc = shutil.which("runc")
    # crun refuses the hybrid cgroup layout of the development machines; images/sandbox/build.sh does the same.
    return [exe, "--log-level=error", *(["--runtime", runc] if runc else []), "--cgroup-manager=cgroupfs"]


def _checked(argv: list[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise GdpvalError(f"{what} failed: {done.stderr.strip()[-1500:]}")
    return done.stdout.strip()


FLAVOURS = ("full", "full-torch")


def build_image(flavour: str) -> str:
    """images/sandbox/build.sh build: the flavour's image of this checkout (nothing to do when its tag exists)."""
    if flavour not in FLAVOURS:
        raise GdpvalError(f"--flavour {flavour!r} is not one of {', '.join(FLAVOURS)}")
    if not BUILD_SCRIPT.is_file():
        raise GdpvalError(f"{BUILD_SCRIPT} is not there (not a source checkout): pass --image with a built full sandbox image")
    done = subprocess.run(["bash", str(BUILD_SCRIPT), "build", flavour], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise GdpvalError(f"{BUILD_SCRIPT} build failed (its log is above)")
    return done.stdout.strip().splitlines()[-1]


@runtime_app.command("build")
def build(
    image: Annotated[Optional[str], typer.Option(help="Unpack this podman image instead of building images/sandbox/Dockerfile.")] = None,
    flavour: Annotated[
        str, typer.Option(help="The image to build: full, or full-torch (with the paper's torch family, about 5 GB more; images/sandbox/README.md).")
    ] = "full",
) -> None:
    """Build the full sandbox image (or take --image) and unpack it for local runs, once per image digest."""
    started = time.monotonic()
    ref = image or build_image(flavour)
    base = podman()
    digest = "sha256:" + _checked([*base, "image", "inspect", "--format", "{{.Id}}", ref], f"podman image inspect {ref}")
    env = runtime.image_env(json.loads(_checked([*base, "image", "inspect", "--format", "{{json .Config.Env}}", ref], "podman image inspect")))
    container = _checked([*base, "create", "--pull=never", ref, "true"], f"podman create {ref}")
    try:
        found, made = runtime.unpack(ref, digest, env, [*base, "export", container])
    finally:
        subprocess.run([*base, "rm", "-f", container], capture_output=True)
    assert found.info is not None and found.root is not None
    verb = f"unpacked in {found.info.unpack_seconds:.0f} s" if made else "already unpacked"
    size = found.info.size_bytes / 1e9
    print(f"runtime {found.info.digest} ({ref}) {verb}: {found.root}, {size:.2f} GB; {time.monotonic() - started:.0f} s in all", file=sys.stderr)
    print(found.root.parent)


@runtime_app.command("show")
def show() -> None:
    """Print the runtimes unpacked here (JSON lines) and which one `gdpval run` picks by default."""
    for row in runtime.listing():
        print(json.dumps(row, ensure_ascii=False))
    chosen = runtime.resolve("auto")
    print(f"gdpval run uses: {chosen.describe()}", file=sys.stderr)


@runtime_app.command("prune")
def prune() -> None:
    """Remove the unpacked runtimes of older images (each about 2.5 GB), keeping the one `gdpval run` picks.

    Run it when no local run is going on: a sandbox over a removed root loses its files."""
    if not runtime.runtimes_dir().is_dir():
        return
    for folder in runtime.prune():
        print(f"removed {folder}", file=sys.stderr)

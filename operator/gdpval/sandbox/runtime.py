"""The root file system a local sandbox runs in: the host's /usr and /etc, or an unpacked sandbox image.

Pods run the full sandbox image (images/sandbox/Dockerfile: LibreOffice, the document and media
libraries, fonts). So that a local run works in the same environment without a container engine,
`gdpval runtime build` unpacks that image once into a folder keyed by its digest,
`<cache>/runtimes/sha256-<hex>/rootfs`, and bubblewrap binds that folder read-only as the sandbox's
root. An unpack goes to a temporary folder renamed into place when complete, so a crash never
leaves a half root that a run would then use; `current` (a symlink, replaced atomically) names the
runtime `auto` and `full` pick.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gdpval.errors import GdpvalError

RUNTIMES_ENV = "GDPVAL_RUNTIMES"
DEFAULT_RUNTIMES = Path.home() / ".cache" / "gdpval" / "runtimes"
CURRENT = "current"
INFO_FILE = "runtime.json"
ROOTFS = "rootfs"
HOST = "host"
HOST_PYTHON = "/usr/bin/python3"
BUILD_IT = "run `gdpval runtime build` (about 2.5 GB on disk; see README, Local runtime)"
# Top-level folders of an image the sandbox gets from elsewhere: bubblewrap's own /proc, /dev and /tmp,
# the sample's /workspace and /reference_files; /sys and /run stay out as on the host runtime.
NOT_FROM_IMAGE = frozenset({"proc", "dev", "tmp", "sys", "run", "workspace", "reference_files"})
HOST_MERGED_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

Choice = Literal["auto", "full", "host"]


class RuntimeInfo(BaseModel):
    """runtime.json beside an unpacked root: which image it is and what unpacking it cost."""

    model_config = ConfigDict(frozen=True)

    image: str
    digest: str
    env: dict[str, str] = Field(default_factory=dict)
    python: str = HOST_PYTHON
    size_bytes: int = 0
    unpack_seconds: float = 0.0
    unpacked_at: float = 0.0


class Runtime(BaseModel):
    """What a sandbox's root is: the host's system folders (root None), or an unpacked image."""

    model_config = ConfigDict(frozen=True)

    root: Path | None = None
    info: RuntimeInfo | None = None

    @property
    def label(self) -> str:
        """What run.json records: "host", the image digest, or the folder of an unnamed root."""
        if self.root is None:
            return HOST
        return self.info.digest if self.info is not None else f"root:{self.root}"

    @property
    def python(self) -> str:
        return self.info.python if self.info is not None else HOST_PYTHON

    @property
    def env(self) -> dict[str, str]:
        return dict(self.info.env) if self.info is not None else {}

    def describe(self) -> str:
        if self.root is None:
            return "host (this machine's /usr and /etc: not the pods' sandbox image)"
        image = f"{self.info.image} {self.info.digest}" if self.info is not None else "an unnamed root"
        return f"full sandbox image {image} unpacked at {self.root}"


def runtimes_dir() -> Path:
    """Where unpacked runtimes live: $GDPVAL_RUNTIMES, else ~/.cache/gdpval/runtimes."""
    return Path(os.environ.get(RUNTIMES_ENV) or DEFAULT_RUNTIMES)


def folder_name(digest: str) -> str:
    """sha256:abc -> sha256-abc (a colon is awkward in paths and bind arguments)."""
    return digest.replace(":", "-")


def load(folder: Path) -> Runtime:
    """The runtime in `folder`: one `gdpval runtime build` made (runtime.json + rootfs/), or a bare root."""
    folder = folder.absolute()
    info_file = folder / INFO_FILE
    if info_file.is_file():
        info = RuntimeInfo.model_validate_json(info_file.read_text())
        return Runtime(root=folder / ROOTFS, info=info)
    if (folder / "usr" / "bin").is_dir():
        return Runtime(root=folder)
    raise GdpvalError(f"{folder} is neither a runtime folder (with {INFO_FILE}) nor a root file system (with usr/bin)")


def current(base: Path | None = None) -> Runtime | None:
    """The runtime `current` points at, or None when none has been built here."""
    link = (base or runtimes_dir()) / CURRENT
    return load(link.resolve()) if link.is_symlink() and link.resolve().is_dir() else None


def resolve(choice: str, base: Path | None = None) -> Runtime:
    """The runtime a `sandbox.runtime` setting names: auto (the full one if built, else host), full, host, or a folder."""
    if choice == HOST:
        return Runtime()
    if choice in ("auto", "full"):
        found = current(base)
        if found is not None:
            return found
        if choice == "full":
            raise GdpvalError(f"sandbox runtime 'full': no full runtime in {base or runtimes_dir()}; {BUILD_IT}")
        return Runtime()
    path = Path(choice).expanduser()
    if not path.is_dir():
        raise GdpvalError(f"sandbox runtime {choice!r} is not auto, full, host or an existing folder")
    return load(path)


def root_binds(runtime: Runtime, seen_at: str | None = None) -> list[str]:
    """bubblewrap arguments that make the sandbox's system folders, all read-only; an image's root is
    read here but bound from `seen_at` when bubblewrap finds it there (gdpval.sandbox.enter's view)."""
    if runtime.root is None:
        return _host_binds()
    args: list[str] = []
    for entry in sorted(os.scandir(runtime.root), key=lambda e: e.name):
        if entry.name in NOT_FROM_IMAGE:
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
        else:
            args += ["--ro-bind", os.path.join(seen_at or runtime.root, entry.name), f"/{entry.name}"]
    return args


def _host_binds() -> list[str]:
    """/usr and /etc, plus the top-level links (or folders) that point into /usr."""
    args = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for path in HOST_MERGED_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def comparability_warning(runtime: Runtime, model: str, scripted: str) -> str | None:
    """A real model's run on the host runtime is not a GDPval run: say so (the scripted model needs no tools)."""
    if runtime.root is not None or model == scripted:
        return None
    differs = "whose tools differ from the pods' sandbox image"
    return f"warning: model {model!r} runs on the host runtime, {differs}: results are not comparable with pod runs; {BUILD_IT}"


# --- effects: building and unpacking ----------------------------------------------------------------


def image_env(config_env: list[str]) -> dict[str, str]:
    """An image's Config.Env ("K=V" strings) as a dict."""
    return dict(item.split("=", 1) for item in config_env if "=" in item)


def python_in(root: Path, env: dict[str, str]) -> str:
    """The `python3` the image's PATH finds first (as a pod's `python3` would), as a path inside the root."""
    for folder in env.get("PATH", "/usr/bin").split(":"):
        candidate = f"{folder.rstrip('/')}/python3"
        if folder.startswith("/") and os.path.lexists(root / candidate.lstrip("/")):
            return candidate
    raise GdpvalError(f"the image has no python3 on its PATH ({env.get('PATH')!r})")


def unpack(image: str, digest: str, env: dict[str, str], export: list[str], base: Path | None = None) -> tuple[Runtime, bool]:
    """Unpack the tar stream `export` prints into <base>/<digest> unless it is there; point `current` at it.

    Returns the runtime and whether it was unpacked now. The tar goes into a temporary folder beside
    the final one, renamed when complete (one rename: atomic on one file system).
    """
    base = base or runtimes_dir()
    final = base / folder_name(digest)
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one unpack at a time: each removes the leftovers of crashed ones
        made = not (final / INFO_FILE).is_file()
        if made:
            _unpack_into(final, image, digest, env, export)
        _point_current(base, final)
    return load(final), made


def _unpack_into(final: Path, image: str, digest: str, env: dict[str, str], export: list[str]) -> None:
    base = final.parent
    _remove_partial(base)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=".partial-", dir=base))
    rootfs = work / ROOTFS
    rootfs.mkdir()
    rootfs.chmod(0o755)  # whatever the umask: a root runner's sandboxes read it as an unprivileged uid
    _extract(export, rootfs)
    info = RuntimeInfo(
        image=image,
        digest=digest,
        env=env,
        python=python_in(rootfs, env),
        size_bytes=_disk_usage(rootfs),
        unpack_seconds=round(time.monotonic() - started, 1),
        unpacked_at=time.time(),
    )
    (work / INFO_FILE).write_text(info.model_dump_json(indent=2))
    work.chmod(0o755)
    os.rename(work, final)


def _extract(export: list[str], rootfs: Path) -> None:
    """`export | tar -x` into rootfs; either side failing fails the unpack."""
    producer = subprocess.Popen(export, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "--numeric-owner", "-C", str(rootfs), "-f", "-"], stdin=producer.stdout, capture_output=True)
    assert producer.stdout is not None and producer.stderr is not None
    producer.stdout.close()
    error = producer.stderr.read().decode(errors="replace")
    if producer.wait() != 0 or tar.returncode != 0:
        raise GdpvalError(f"unpacking the image failed: {error.strip()[-500:]} {tar.stderr.decode(errors='replace').strip()[-500:]}")


def _remove_partial(base: Path) -> None:
    """Leftovers of unpacks that crashed (never used: only complete folders are renamed into place)."""
    for leftover in base.glob(".partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _point_current(base: Path, final: Path) -> None:
    link = base / CURRENT
    if link.is_symlink() and link.resolve() == final.resolve():
        return
    staged = base / f".current-{os.getpid()}"
    staged.unlink(missing_ok=True)
    staged.symlink_to(final.name)
    os.replace(staged, link)


def _disk_usage(root: Path) -> int:
    done = subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True)
    return int(done.stdout.split()[0]) if done.returncode == 0 else 0


def listing(base: Path | None = None) -> list[dict[str, Any]]:
    """What is unpacked in `base`, for `gdpval runtime show`."""
    base = base or runtimes_dir()
    chosen = current(base)
    rows = []
    for info_file in sorted(path for path in base.glob(f"*/{INFO_FILE}") if not path.parent.is_symlink()):
        info = RuntimeInfo.model_validate_json(info_file.read_text())
        rows.append({"folder": str(info_file.parent), "current": chosen is not None and chosen.info == info, **json.loads(info.model_dump_json())})
    return rows


def prune(base: Path | None = None) -> list[Path]:
    """Remove every unpacked runtime but the current one (a run still using one would lose its root)."""
    base = base or runtimes_dir()
    chosen = current(base)
    keep = chosen.root.parent.resolve() if chosen is not None and chosen.root is not None else None
    removed = []
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for info_file in sorted(base.glob(f"*/{INFO_FILE}")):
            folder = info_file.parent
            if not folder.is_symlink() and folder.resolve() != keep:
                shutil.rmtree(folder)
                removed.append(folder)
    return removed

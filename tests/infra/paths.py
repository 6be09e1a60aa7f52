"""Where the hack/ scripts keep their cache and state; mirrors hack/lib.sh."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HACK = REPO_ROOT / "hack"


def versions() -> dict[str, str]:
    """The KEY=value pins of hack/versions.sh (the one place versions are written)."""
    pins: dict[str, str] = {}
    for line in (HACK / "versions.sh").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def cache_dir() -> Path:
    return Path(os.environ.get("GDPVAL_CACHE", "/var/cache/gdpval-dev"))


def work_dir() -> Path:
    return Path(os.environ.get("GDPVAL_WORKDIR", "/var/lib/gdpval-dev"))


def minio_binary() -> Path:
    return cache_dir() / "minio" / versions()["MINIO_VERSION"] / "bin" / "minio"


def tools_bin() -> Path:
    return cache_dir() / "tools" / "bin"

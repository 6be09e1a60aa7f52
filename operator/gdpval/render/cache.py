"""Renderings kept on disk by the digest of the file and the renderer, so a file is converted once.

`<cache>/<key[:2]>/<key>/` holds view.json and the PNG pages; a rendering is written to a temporary
folder and renamed into place, so a killed judge never leaves half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from gdpval.render.view import Facts, View

CACHE_ENV = "GDPVAL_RENDER_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "gdpval" / "render"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def key(digest: str, suffix: str, renderer: str) -> str:
    """One key per file content, the suffix it is read as, and the renderer (its version and runtime)."""
    return hashlib.sha256(f"{digest}\0{suffix}\0{renderer}".encode()).hexdigest()


def load(base: Path, entry: str, name: str) -> View | None:
    """The cached view under `name` (the name is the caller's, the content the file's), or None."""
    folder = base / entry[:2] / entry
    try:
        body = json.loads((folder / "view.json").read_text())
        images = [(folder / f"page-{n}.png").read_bytes() for n in range(body["images"])]
        return View(name, body["kind"], body["text"], images, body["unrenderable"], Facts.model_validate(body["facts"]), body["renderer"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(base: Path, entry: str, view: View) -> None:
    final = base / entry[:2] / entry
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".partial-", dir=final.parent))
    try:
        for index, png in enumerate(view.images):
            (work / f"page-{index}.png").write_bytes(png)
        body = {**asdict(view), "images": len(view.images), "facts": view.facts.model_dump()}
        (work / "view.json").write_text(json.dumps(body))
        os.rename(work, final)
    except OSError:  # another judge stored it first, or the disk is full: the cache is only a cache
        shutil.rmtree(work, ignore_errors=True)

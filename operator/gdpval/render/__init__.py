"""One faithful rendering of a file for every judge and for the readiness check.

`view_file` turns a file into a View: text, PNG pages and facts (pages, sheets, slides, fonts), or
the reason it cannot be rendered. The host only checks the zip directory (gdpval.render.guard) and
hashes the file; the parsing runs in a limited child (gdpval.render.child: a sandbox of the full
runtime with LibreOffice, the judge pod's sidecar of the sandbox image, else a limited host child), and the result is cached by the file's digest
and the renderer (gdpval.render.cache): its version, its runtime, its limits and the worker's own source,
so a changed worker never serves an old result.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from gdpval.render import cache, child, guard
from gdpval.render.view import View
from gdpval.render.worker import kind_of

RENDERER_VERSION = "render-2"  # 2: LibreOffice given an absolute HOME (a relative one aborted it)


@functools.cache
def _worker_digest() -> str:
    return hashlib.sha256(child.WORKER.read_bytes()).hexdigest()


def view_file(path: Path, name: str, limits: child.RenderLimits | None = None, cache_base: Path | None = None) -> View:
    """The view of one file named `name` (its suffix says how to read it); never raises for a bad file."""
    suffix = Path(name).suffix.lower()[:16]
    system, limits = child.backend(os.environ), limits or child.RenderLimits()
    renderer = f"{RENDERER_VERSION} {child.renderer_label(system)}"
    base = cache_base or cache.cache_dir()
    entry = cache.key(cache.file_digest(path), suffix, f"{renderer} {limits} {_worker_digest()}")
    found = cache.load(base, entry, name)
    if found is not None:
        return found
    reason = guard.refusal(path, suffix)
    if reason:
        view = View.refused(name, kind_of(suffix), reason, renderer)
    else:
        try:
            view = child.run_worker(path, suffix, name, limits, system)
        except child.Transient as exc:
            return View.refused(name, kind_of(suffix), str(exc), renderer)
        except child.LimitBroken as exc:
            view = View.refused(name, kind_of(suffix), str(exc), renderer)
    view.renderer = renderer
    cache.store(base, entry, view)
    return view

"""Slides of a pptx rendered as images by LibreOffice, where the full sandbox runtime is unpacked here.

`gdpval runtime build` unpacks the sandbox image (with LibreOffice) once; LibreOffice then runs on
that root under bubblewrap: the root read-only, no network, only a scratch folder writable, so a
model-made file is never opened by software on the host itself. Without the runtime or bubblewrap,
slides stay text only and the view says why.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from gdpval.sandbox import runtime
from gdpval.sandbox.local import BWRAP

RENDER_TIMEOUT_S = 120


class SlidesUnavailable(Exception):
    """Slides cannot be rendered here; the message says why, for the view."""


def slides_pdf(pptx: Path, scratch: Path) -> Path:
    """`pptx` converted to a PDF in `scratch` by the full runtime's LibreOffice."""
    found = runtime.current()
    if found is None or found.root is None:
        raise SlidesUnavailable("no full sandbox runtime on this machine (`gdpval runtime build` unpacks one)")
    if not os.access(BWRAP, os.X_OK):
        raise SlidesUnavailable(f"{BWRAP} not found (Debian package: bubblewrap)")
    (scratch / "in.pptx").write_bytes(pptx.read_bytes())
    argv = [BWRAP, *runtime.root_binds(found), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", str(scratch), "/work"]
    argv += ["--chdir", "/work", "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session", "--clearenv", "--setenv", "HOME", "/tmp"]
    argv += ["--setenv", "PATH", "/usr/bin:/bin", "--", "soffice", "--headless", "--norestore", "--convert-to", "pdf", "--outdir", "/work", "/work/in.pptx"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RENDER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlidesUnavailable(f"LibreOffice did not finish within {RENDER_TIMEOUT_S} s") from None
    pdf = scratch / "in.pdf"
    if done.returncode != 0 or not pdf.is_file():
        raise SlidesUnavailable(f"LibreOffice could not convert it (exit {done.returncode}: {' '.join(done.stderr.split())[-200:]})")
    return pdf


def rendered(pptx: Path, render_pdf) -> tuple[list[bytes], str]:
    """Slide images through `render_pdf` (the PDF view's renderer), or none and why."""
    with tempfile.TemporaryDirectory(prefix="gdpval-slides-") as scratch:
        try:
            return render_pdf(slides_pdf(pptx, Path(scratch))), ""
        except SlidesUnavailable as exc:
            return [], f"(slides not rendered as images: {exc})"

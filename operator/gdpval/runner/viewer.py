"""The `view` tool of a run that offers pictures: the judge's renderer run inside the sample's own sandbox.

The model's file is parsed where its commands run (its sandbox, under its limits, as its user), never in
the harness: the worker's source goes in through python_exec and writes its pages into a folder of the
workspace, which the harness reads without following links (render.child.copy_out), then removes. In the
full runtime (the pods' image) Office files come back as LibreOffice lays them out; in the host runtime
only PDFs and images have pictures, as for the judge.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path, PurePosixPath

from gdpval.agent.images import Looked
from gdpval.agent.loop import ToolBackend
from gdpval.render import worker
from gdpval.render.child import copy_out, read_rendering
from gdpval.render.view import View, bounded

VIEW_FOLDER = ".gdpval-view"
CPU_SECONDS = 120  # of one rendering, LibreOffice included
TEXT_SHOWN = 6_000  # characters of the file's text returned beside its pictures
RENDERER = "the sample's sandbox"


class SandboxViewer:
    """Pictures of a workspace file, made by the render worker through the sample's own tools."""

    def __init__(self, tools: ToolBackend, host_workspace: Path):
        self.tools = tools
        self.host_workspace = host_workspace

    def view(self, path: str, timeout: float) -> Looked:
        done = self.tools.call("python_exec", {"code": worker_code(path), "timeout": timeout}, timeout)
        if done.timed_out:
            return Looked(f"error: rendering {path} did not finish within {timeout:g} s")
        with tempfile.TemporaryDirectory(prefix="gdpval-view-") as scratch:
            kept = Path(scratch) / "out"
            seen = read_rendering(kept, path, RENDERER) if copy_out(self.host_workspace, kept, VIEW_FOLDER) else None
        self.tools.call("bash", {"command": f"rm -rf {VIEW_FOLDER}", "timeout": 60.0}, 60.0)
        if seen is None:
            return Looked(f"error: {path} could not be rendered: {done.output.strip()[-500:] or f'exit code {done.exit_code}'}")
        return Looked(describe(path, seen), seen.images)


@functools.cache
def _worker_source() -> str:
    return Path(worker.__file__).read_text(encoding="utf-8")


def worker_code(path: str) -> str:
    """Python for the sandbox: the worker, under a CPU limit, rendering `path` into VIEW_FOLDER; a missing
    file is said plainly, as a command would."""
    suffix = PurePosixPath(path).suffix.lower()
    return (
        "import os, resource, shutil, sys\n"
        f"if not os.path.isfile({path!r}):\n"
        f"    sys.exit('no such file: ' + {path!r})\n"
        "_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]\n"
        f"_cpu = {CPU_SECONDS} if _hard == resource.RLIM_INFINITY else min({CPU_SECONDS}, _hard)\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (_cpu, _hard))\n"
        f"os.unlink({VIEW_FOLDER!r}) if os.path.islink({VIEW_FOLDER!r}) else shutil.rmtree({VIEW_FOLDER!r}, ignore_errors=True)\n"
        "_worker = {'__name__': 'gdpval_view_worker'}\n"
        f"exec(compile({_worker_source()!r}, 'worker.py', 'exec'), _worker)\n"
        f"sys.exit(_worker['main']([{path!r}, {suffix!r}, {VIEW_FOLDER!r}]))\n"
    )


def describe(path: str, seen: View) -> str:
    """The tool result: what the file is, how many pictures follow (or why none), then the start of its text."""
    if seen.unrenderable:
        return f"error: {path} could not be rendered: {seen.unrenderable}"
    facts = seen.facts
    laid_out = ("slide", facts.slides) if facts.slides else ("page", facts.pages)  # a deck's pages are its slides
    counts = [f"{value} {name}{'' if value == 1 else 's'}" for name, value in (("sheet", facts.sheets), laid_out) if value]
    head = f"{path}: {seen.kind}" + (f" ({', '.join(counts)})" if counts else "")
    if seen.images:
        shown = f"{len(seen.images)} picture(s) of its first pages follow in the next message."
    else:
        shown = f"no pictures: {facts.office or f'a {seen.kind} file has none here'}."
    return f"{head}; {shown}\n\n{bounded(seen.text, TEXT_SHOWN)}".rstrip()

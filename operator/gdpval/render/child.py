"""Where the worker runs: in a local sandbox of the full runtime, else in a limited child of the host's python.

With the full runtime unpacked (`gdpval runtime build`) and bubblewrap working, each file is rendered
in a LocalSandbox of that runtime, the same machinery a sample runs in: bubblewrap namespaces with
no network, the seccomp filter, a root runner's unprivileged uid, the sample cgroup's memory and
process limits, a loop disk, and the tool server's timeout. The worker there uses the runtime's
python and LibreOffice. Otherwise it runs as a child of this python, in a new session, with
RLIMIT_AS, RLIMIT_CPU and RLIMIT_FSIZE set and a wall-clock timeout, as the sandbox uid when root:
text only, no LibreOffice pages.

In the operator's judge Job the worker runs in a sidecar of the run's sandbox image (LibreOffice) instead,
through that sidecar's tool server (PodSandbox): the judge copies the file and the worker into a folder
shared with it, and the conversion runs there as the sidecar's non-root user, under its container's
memory limit (commands are the OOM killer's first choice), a CPU ulimit and the tool server's timeout.

What the worker leaves is untrusted: files are opened without following links, size-bounded, and
the JSON is validated; a PNG must start with the PNG signature.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import resource
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gdpval import contract
from gdpval.render import worker
from gdpval.render.limits import MIB, RenderLimits
from gdpval.render.view import Facts, View, bounded
from gdpval.sandbox import runtime
from gdpval.sandbox.client import SandboxClient, SandboxError, SandboxUnavailable
from gdpval.sandbox.launch import bwrap_status, sandbox_owner
from gdpval.sandbox.limits import Limits
from gdpval.sandbox.local import LocalSandbox
from gdpval.sandbox.view import VIEW_BASE

log = logging.getLogger(__name__)

VIEW_JSON_MAX = 1 * MIB
PNG_MAX = 8 * MIB
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORKER = Path(worker.__file__)
POD_READY_SECONDS = 120.0  # the sidecar's tool server starts with the pod; the judge waits this long for it once


@dataclass(frozen=True)
class PodSandbox:
    """The judge pod's render sidecar: its tool server, the token file made in the pod, the folder both
    containers mount, and its image (named in the renderer's label)."""

    url: str
    token_file: Path
    shared: Path
    image: str


Backend = runtime.Runtime | PodSandbox | None  # None: the limited host child, text only


class Transient(Exception):
    """The conversion hit a limit of this machine's moment (a timeout): not cached, tried again next time."""


def full_runtime() -> runtime.Runtime | None:
    """The unpacked full runtime when bubblewrap can run it here, else None (the host child is used)."""
    found = runtime.current()
    return found if found is not None and found.root is not None and bwrap_status()[0] else None


def backend(env: Mapping[str, str], local: Callable[[], runtime.Runtime | None] = full_runtime, office: Callable[[PodSandbox], bool] | None = None) -> Backend:
    """Where files are rendered: the pod's sidecar when its Job names one and its image has LibreOffice, else the local
    full runtime, else the host child (text only; a sidecar without LibreOffice, a slim image, falls back to it)."""
    url = env.get(contract.RENDER_URL_ENV, "")
    if url:
        image = env.get(contract.RENDER_IMAGE_ENV, "") or "the run's sandbox image"
        pod = PodSandbox(url, Path(contract.RENDER_TOKEN_FILE), Path(contract.RENDER_DIR), image)
        return pod if (office or has_office)(pod) else None
    return local()


def text_only(system: Backend) -> bool:
    """Whether this backend renders without LibreOffice: no pages, sheets or slides counted, no fonts checked."""
    return system is None


@functools.cache
def has_office(pod: PodSandbox) -> bool:
    """Whether the sidecar's image has LibreOffice, asked once per process; a sidecar that cannot answer has none."""
    try:
        client = SandboxClient(pod.url, pod.token_file.read_text().strip())
        _wait_ready(client)
        found = client.call("bash", {"command": "command -v soffice"}, POD_READY_SECONDS).exit_code == 0
    except (OSError, SandboxError, SandboxUnavailable) as exc:
        log.warning("renderer: the render sidecar of image %s did not answer (%s): text only", pod.image, exc)
        return False
    if not found:
        log.warning("renderer: image %s has no LibreOffice (not the full sandbox image): text only", pod.image)
    return found


def renderer_label(system: Backend) -> str:
    if isinstance(system, PodSandbox):
        return f"pod sidecar of image {system.image}"
    return f"full runtime {system.label}" if system is not None else "host child (no full runtime: text only)"


def run_worker(source: Path, suffix: str, name: str, limits: RenderLimits, system: Backend) -> View:
    """The worker's view of `source`; unrenderable when it failed or broke a limit; Transient on a timeout."""
    # Under VIEW_BASE, not TMPDIR: a dropped uid must walk to its scratch (pytest's and many users' TMPDIR are 0700).
    with tempfile.TemporaryDirectory(prefix="gdpval-render-", dir=VIEW_BASE) as scratch:
        if isinstance(system, PodSandbox):
            out = _in_pod(source, suffix, Path(scratch), limits, system)
        elif system is not None:
            out = _in_sandbox(source, suffix, Path(scratch), limits, system)
        else:
            out = _in_child(source, suffix, Path(scratch), limits)
        return read_rendering(out, name, renderer_label(system))


@functools.cache
def _child_owner() -> tuple[int, int] | None:
    """The uid:gid a root runner's host child drops to, or None: when that uid cannot start this
    interpreter (a pyenv or venv under /root), the child keeps the runner's uid, with its limits, and
    says so once, rather than leaving every file unrenderable."""
    owner = sandbox_owner()
    if owner is None:
        return None
    probe = ["/usr/bin/setpriv", f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups", "--", sys.executable, "-I", "-c", "pass"]
    try:
        ok = subprocess.run(probe, env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        log.warning("renderer: uid %d cannot start %s; the host child keeps the runner's uid (its memory, CPU and time limits hold)", owner[0], sys.executable)
    return owner if ok else None


def _in_child(source: Path, suffix: str, scratch: Path, limits: RenderLimits) -> Path:
    owner = _child_owner()
    work = scratch / "work"
    work.mkdir()
    shutil.copyfile(source, work / f"in{suffix}")
    if owner is not None:
        for path in (scratch, work, work / f"in{suffix}"):
            os.chown(path, *owner)
    argv = [sys.executable, "-I", str(WORKER), str(work / f"in{suffix}"), suffix, str(work / "out")]
    if owner is not None:
        argv = ["/usr/bin/setpriv", f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups", "--", *argv]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    try:
        proc = subprocess.Popen(argv, env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=lambda: _limit(limits))  # fmt: skip
    except OSError as exc:
        raise LimitBroken(f"the renderer could not start: {exc}") from None
    try:
        _, stderr = proc.communicate(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise Transient(f"the conversion did not finish within {limits.wall_seconds:g} s") from None
    finally:
        _kill_group(proc.pid)
    if proc.returncode != 0:
        raise_for(proc.returncode, stderr.decode(errors="replace"), limits)
    kept = scratch / "out"
    copy_out(work, kept)
    return kept


def _limit(limits: RenderLimits) -> None:
    """In the child before exec: its address space, CPU time and file sizes, and no core dumps."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.disk_bytes, limits.disk_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def raise_for(code: int, stderr: str, limits: RenderLimits) -> None:
    """A worker that died: say which limit it broke where that is known."""
    tail = " ".join(stderr.split())[-300:]
    if code in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL) or "MemoryError" in stderr:
        which = "CPU time" if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) else "memory"
        raise LimitBroken(f"the conversion broke the renderer's {which} limit ({limits.memory_bytes // MIB} MiB, {limits.cpu_seconds} CPU s): {tail}")
    raise LimitBroken(f"the renderer failed (exit {code}): {tail}")


class LimitBroken(Exception):
    """The worker died: of a limit or a crash. The file is unrenderable."""


def _in_sandbox(source: Path, suffix: str, scratch: Path, limits: RenderLimits, system: runtime.Runtime) -> Path:
    sandbox = LocalSandbox(scratch / "workspace", {}, isolation="bwrap", system=system, limits=Limits(limits.memory_bytes, limits.pids, limits.disk_bytes))
    with sandbox:
        workspace = sandbox.host_workspace
        shutil.copyfile(source, workspace / f"in{suffix}")
        shutil.copyfile(WORKER, workspace / "worker.py")
        if sandbox.owner is not None:
            for name in (f"in{suffix}", "worker.py"):
                os.chown(workspace / name, *sandbox.owner)
        command = f"ulimit -t {limits.cpu_seconds} && exec {sandbox.python} -I worker.py in{suffix} {suffix} out 2>&1"
        try:
            done = sandbox.client().call("bash", {"command": command}, limits.wall_seconds)
        except (SandboxError, SandboxUnavailable) as exc:
            raise LimitBroken(f"the render sandbox failed: {exc}") from None
        if done.timed_out:
            raise Transient(f"the conversion did not finish within {limits.wall_seconds:g} s")
        kept = scratch / "out"
        if not copy_out(workspace, kept):
            raise_for(done.exit_code, done.output, limits)
    return kept


def _in_pod(source: Path, suffix: str, scratch: Path, limits: RenderLimits, pod: PodSandbox) -> Path:
    """The worker run in the sidecar on a copy of `source` in a fresh folder shared with it; its result is copied
    into `scratch`, the judge's own (the sidecar can still write the shared folder)."""
    with tempfile.TemporaryDirectory(prefix="gdpval-render-", dir=pod.shared) as name:
        return _through_sidecar(source, suffix, Path(name), scratch / "out", limits, pod)


def _through_sidecar(source: Path, suffix: str, shared: Path, kept: Path, limits: RenderLimits, pod: PodSandbox) -> Path:
    shutil.copyfile(source, shared / f"in{suffix}")
    shutil.copyfile(WORKER, shared / "worker.py")
    command = f"cd {shlex.quote(str(shared))} && ulimit -t {limits.cpu_seconds} && exec python3 -I worker.py in{suffix} {suffix} out 2>&1"
    try:
        client = SandboxClient(pod.url, pod.token_file.read_text().strip())
        _wait_ready(client)
        done = client.call("bash", {"command": command}, limits.wall_seconds)
    except (OSError, SandboxError, SandboxUnavailable) as exc:
        raise LimitBroken(f"the render sidecar failed: {exc}") from None
    if done.timed_out:
        raise Transient(f"the conversion did not finish within {limits.wall_seconds:g} s")
    if not copy_out(shared, kept):
        raise_for(done.exit_code, done.output, limits)
    return kept


def _wait_ready(client: SandboxClient) -> None:
    """The sidecar starts with the pod: wait for it before the first conversion, not before every one."""
    if client.address not in _READY:
        client.wait_ready(POD_READY_SECONDS)
        _READY.add(client.address)


_READY: set[str] = set()


def copy_out(workspace: Path, kept: Path, folder: str = "out") -> bool:
    """The worker's view.json and pages, copied out of the sandbox's disk (unmounted when it stops) into `kept`.

    The sandbox wrote `folder`: it is opened without following a link and its files are read relative to it,
    so a link put there cannot make the host read one of its own files. False when there is no view.json."""
    try:
        made = os.open(workspace / folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        kept.mkdir()
        for name in ["view.json", *(f"page-{n}.png" for n in range(worker.IMAGES_PER_FILE))]:
            data = read_bounded(name, PNG_MAX if name.endswith(".png") else VIEW_JSON_MAX, made)
            if data is not None:
                (kept / name).write_bytes(data)
    except FileExistsError:
        return False  # `kept` is made here: a link or folder the worker left in its place is not used
    finally:
        os.close(made)
    return (kept / "view.json").exists()


def read_bounded(path: Path | str, limit: int, folder: int | None = None) -> bytes | None:
    """A regular file's bytes, never through a link, at most `limit`; None when absent or not a plain file.
    `folder` is an open directory `path` is relative to."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return handle.read(limit + 1)


def read_rendering(out: Path, name: str, renderer: str) -> View:
    """The view the worker wrote into `out`, checked: sizes, JSON shape, PNG signatures."""
    raw = read_bounded(out / "view.json", VIEW_JSON_MAX)
    if raw is None or len(raw) > VIEW_JSON_MAX:
        return View.refused(name, worker.kind_of(Path(name).suffix.lower()), "the renderer left no readable result", renderer)
    try:
        body = json.loads(raw)
        kind, text, facts, reason = str(body["kind"]), str(body["text"]), Facts.model_validate(body["facts"]), str(body["unrenderable"])[:500]
        pages = [read_bounded(out / f"page-{n}.png", PNG_MAX) for n in range(min(len(body["images"]), worker.IMAGES_PER_FILE))]
    except (ValueError, KeyError, TypeError, ValidationError) as exc:
        return View.refused(name, worker.kind_of(Path(name).suffix.lower()), f"the renderer's result is malformed ({exc.__class__.__name__})", renderer)
    if reason:
        return View.refused(name, kind, reason, renderer)
    images = [png for png in pages if png is not None and len(png) <= PNG_MAX and png.startswith(PNG_SIGNATURE)]
    return View(name, kind, bounded(text, worker.TEXT_PER_FILE), images, facts=facts, renderer=renderer)

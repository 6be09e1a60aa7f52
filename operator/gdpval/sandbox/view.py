"""A root runner's view: the folders bubblewrap binds, reachable by the uid it drops to.

That uid cannot walk root's private folders (a 0700 TMPDIR, /root), so each source gets an empty
place in a view folder it can walk, and the spawner binds the sources there in a private copy of the
host's mount namespace (spawn_in_view). bubblewrap's --die-with-parent fires when the *thread* that
forked it exits, so every server is forked by one spawner thread that lives as long as the process:
sandboxes can be started from short-lived threads and still die with the runner.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gdpval.sandbox.limits import CLONE_NEWNS, MS_BIND, MS_PRIVATE, MS_REC, OWNER_FILE, libc
from gdpval.sandbox.limits.disk import remove_orphans

VIEW_PREFIX = "gdpval-view-"
VIEW_BASE = "/tmp"  # not TMPDIR: the view's own path must be walkable by the dropped uid
MS_RDONLY = 1
Bind = tuple[str, str, str | None]  # (host source, its place in the view, an empty layer to overlay it on)


@functools.cache
def spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that forks sandboxes (see the module's docstring)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="gdpval-sandbox-spawner")


_host_mounts: list[int] = []  # the spawner thread's descriptor of the host's mount namespace, once it left it


def _check(result: int, call: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{call}: {os.strerror(ctypes.get_errno())}")


def _layer(source: str, place: str, empty: str) -> bool:
    """Mount `source` read-only on `place` as an overlay over an `empty` folder, naming both layers by
    descriptor: a bind's mount root in /proc/self/mountinfo is its path in its file system (the runtime's
    folder under the home's cache), an overlay's is `/` with the layers as given here. False where this
    kernel or file system refuses the overlay (the caller binds instead)."""
    fds = [os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC) for path in (source, empty)]
    try:
        options = "lowerdir=" + ":".join(f"/proc/self/fd/{fd}" for fd in fds)
        return libc().mount(b"gdpval-runtime", os.fsencode(place), b"overlay", MS_RDONLY, options.encode()) == 0
    finally:
        for fd in fds:
            os.close(fd)


def spawn_in_view(binds: list[tuple[str, str, str | None]], popen: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """In the spawner thread: start `popen` in a private copy of the host's mount namespace where each
    source is bound on its place in the view (or layered over the empty folder given, see _layer); the thread
    then returns to the host's namespace, and the copy lives as long as the sandbox. The binds never reach
    the host, and a killed runner leaves none.

    A mount namespace is per thread, so the rest of the runner (the sample threads that mount workspace
    disks, collect deliverables) stays in the host's; a fresh copy per sandbox sees the disks mounted
    since. bubblewrap binds the view's paths as the dropped uid, which could not walk to the sources.
    """
    if not binds:
        return popen()
    if not _host_mounts:
        _host_mounts.append(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
    _check(libc().unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    try:
        _check(libc().mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making the sandbox's mounts private")
        for source, place, empty in binds:
            if empty is None or not _layer(source, place, empty):
                _check(libc().mount(os.fsencode(source), os.fsencode(place), None, MS_BIND | MS_REC, None), f"binding {source!r} on {place!r}")
        return popen()
    finally:
        _check(libc().setns(_host_mounts[0], CLONE_NEWNS), "returning to the host's mount namespace")


@functools.cache
def remove_orphan_views() -> None:
    """The views a killed runner left (empty places, and copies only their uid may read); once per process."""
    remove_orphans(Path(VIEW_BASE), VIEW_PREFIX)


class View:
    """The view of one sandbox dropping to uid:gid: the workspace becomes theirs, and each folder
    bubblewrap binds gets an empty place that spawn_in_view binds it on. The runtime's root is layered,
    not bound, so that the sandbox's mountinfo does not name where it was unpacked."""

    def __init__(self, workspace: Path, root: Path | None, owner: tuple[int, int]) -> None:
        os.chown(workspace, *owner)
        remove_orphan_views()
        self.path = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX, dir=VIEW_BASE))
        (self.path / OWNER_FILE).write_text(str(os.getpid()))
        self.path.chmod(0o711)
        sources = {"workspace": workspace}
        if root is not None:
            sources["root"] = root
            self.place("empty").mkdir()
        self.binds: list[Bind] = []
        for name, host in sources.items():
            self.place(name).mkdir()
            self.binds.append((str(host), str(self.place(name)), str(self.place("empty")) if name == "root" else None))

    def place(self, name: str) -> Path:
        return self.path / name

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

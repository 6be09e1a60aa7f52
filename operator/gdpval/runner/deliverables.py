"""Collect and upload what the model left in `<workspace>/deliverable_files/`.

The model controls that folder and may still run processes that change it, so nothing here
follows a symlink: every directory and file is opened relative to its parent's descriptor with
O_NOFOLLOW, and each file is re-checked with fstat on the descriptor that is actually read.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gdpval.sample import RefusedFile, RenamedFile
from gdpval.storage.base import Storage

DELIVERABLE_DIR = "deliverable_files"
ROOT_PATH = "."  # how a refusal of deliverable_files itself is reported
MAX_DEPTH = 32
MAX_ENTRIES_FACTOR = 10
MIN_ENTRY_BUDGET = 10_000
MAX_COUNT_REFUSALS = 100
IN_MEMORY_BYTES = 8 * 1024 * 1024
CHUNK = 1024 * 1024
MAX_NAME_BYTES = 255
MAX_KEPT_SUFFIX = 16
# What a grader on Windows or macOS could not open: forbidden characters and reserved device names.
_FORBIDDEN = set('\\:*?"<>|')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class Deliverable:
    relpath: str  # under deliverable_files/, `/`-separated, as the model wrote it
    host_path: Path
    size: int
    stored_as: str = ""  # the portable name it is uploaded under (relpath when that is portable)

    @property
    def key(self) -> str:
        return self.stored_as or self.relpath


@dataclass
class Collected:
    root: Path  # <workspace>/deliverable_files
    max_file_bytes: int
    max_total_bytes: int | None = None  # by apparent size: a sparse file counts whole, as it is copied
    files: list[Deliverable] = field(default_factory=list)
    refused: list[RefusedFile] = field(default_factory=list)
    renamed: list[RenamedFile] = field(default_factory=list)


class Refused(Exception):
    """A path that is not a plain file of the workspace; the message is the reason."""


def check_relpath(relpath: str) -> None:
    """Refuse names that could address anything outside deliverable_files/."""
    if not relpath or "\x00" in relpath:
        raise Refused("name is empty or contains NUL")
    if relpath.startswith("/"):
        raise Refused("name is an absolute path")
    if any(part in ("", ".", "..") for part in relpath.split("/")):
        raise Refused("name escapes deliverable_files (empty, '.' or '..' component)")


def _check_name(name: str) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("name is not valid UTF-8") from None
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise Refused("name contains control characters")


def portable_name(name: str) -> tuple[str, list[str]]:
    """A name every grader's OS can open, and why it differs from `name` (nothing when it does not).

    Spaces, accents and other Unicode stay: only what Windows or macOS cannot store changes.
    """
    reasons = []
    new = "".join("_" if ch in _FORBIDDEN else ch for ch in name)
    if new != name:
        reasons.append('characters other systems forbid (\\ : * ? " < > |) became _')
    stripped = new.rstrip(". ") or "_"
    if stripped != new:
        reasons.append("trailing dots or spaces removed")
    if stripped.split(".")[0].upper() in _RESERVED:
        stripped = f"_{stripped}"
        reasons.append("a reserved device name on Windows got a _ prefix")
    if len(stripped.encode("utf-8")) > MAX_NAME_BYTES:
        stripped = _shorten(stripped)
        reasons.append(f"longer than {MAX_NAME_BYTES} bytes: shortened, extension kept")
    return stripped, reasons


def _shorten(name: str) -> str:
    stem, dot, suffix = name.rpartition(".")
    if not dot or len(suffix) > MAX_KEPT_SUFFIX:
        stem, suffix = name, ""
    tail = f".{suffix}" if suffix else ""
    room = MAX_NAME_BYTES - len(tail.encode("utf-8"))
    return stem.encode("utf-8")[:room].decode("utf-8", "ignore") + tail


def _portable(files: list[Deliverable]) -> tuple[list[Deliverable], list[RenamedFile], list[RefusedFile]]:
    """Give each file its portable name; a rename that lands on a name already taken is refused."""
    kept, renamed, refused = [], [], []
    taken = {f.relpath for f in files}
    for item in files:
        parts = [portable_name(part) for part in item.relpath.split("/")]
        stored = "/".join(name for name, _ in parts)
        reasons = [r for _, why in parts for r in why]
        if not reasons:
            kept.append(item)
        elif stored in taken:
            refused.append(RefusedFile(path=item.relpath, reason=f"its portable name {stored!r} is already taken"))
        else:
            taken.add(stored)
            kept.append(Deliverable(item.relpath, item.host_path, item.size, stored))
            renamed.append(RenamedFile(path=item.relpath, stored_as=stored, reason="; ".join(dict.fromkeys(reasons))))
    return kept, renamed, refused


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISLNK(mode):
        return "symlink (not followed)"
    if stat.S_ISFIFO(mode):
        return "not a regular file (fifo)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "not a regular file (device)"
    if stat.S_ISSOCK(mode):
        return "not a regular file (socket)"
    return "not a regular file"


def _check_file_stat(st: os.stat_result, max_file_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused(_kind(st.st_mode))
    if st.st_nlink > 1:
        raise Refused("hard link (its data is shared with another path)")
    if st.st_size > max_file_bytes:
        raise Refused(f"over the size cap ({st.st_size} bytes > {max_file_bytes})")


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except OSError as exc:
        try:
            mode = os.lstat(root).st_mode
        except OSError:
            raise exc from None
        raise Refused(f"deliverable_files itself is not a real directory: {_kind(mode)}") from None


class _Walker:
    """Depth-first walk over descriptors, bounded in depth and in entries visited."""

    def __init__(self, max_file_bytes: int, max_files: int) -> None:
        self.max_file_bytes = max_file_bytes
        self.budget = max(MIN_ENTRY_BUDGET, MAX_ENTRIES_FACTOR * max_files)
        self.files: list[tuple[str, int]] = []
        self.refused: list[RefusedFile] = []

    def refuse(self, relpath: str, reason: str) -> None:
        printable = os.fsencode(relpath).decode("utf-8", "backslashreplace")
        self.refused.append(RefusedFile(path=printable, reason=reason))

    def walk(self, dir_fd: int, prefix: str, depth: int) -> None:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if self.budget <= 0:
                self.refuse(prefix or ROOT_PATH, "walk stopped: too many entries")
                return
            self.budget -= 1
            self.visit(dir_fd, entry, f"{prefix}{entry.name}", depth)

    def visit(self, dir_fd: int, entry: os.DirEntry, relpath: str, depth: int) -> None:
        try:
            _check_name(entry.name)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                self.descend(dir_fd, entry.name, relpath, depth)
            else:
                _check_file_stat(st, self.max_file_bytes)
                self.files.append((relpath, st.st_size))
        except Refused as exc:
            self.refuse(relpath, str(exc))
        except OSError as exc:
            self.refuse(relpath, f"unreadable: {exc.strerror}")

    def descend(self, dir_fd: int, name: str, relpath: str, depth: int) -> None:
        if depth >= MAX_DEPTH:
            raise Refused(f"directory nested deeper than {MAX_DEPTH} levels")
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise Refused(f"directory changed while collecting ({exc.strerror})") from None
        try:
            self.walk(child, f"{relpath}/", depth + 1)
        finally:
            os.close(child)


def collect(workspace: Path, *, max_file_bytes: int, max_files: int, max_total_bytes: int | None = None, folder: str = DELIVERABLE_DIR) -> Collected:
    """The regular files under `folder` of the workspace (deliverable_files/; the whole workspace
    is `.`) within the caps, and everything refused."""
    root = Path(workspace) / folder
    result = Collected(root=root, max_file_bytes=max_file_bytes, max_total_bytes=max_total_bytes)
    if not os.path.lexists(root):
        return result
    try:
        root_fd = _open_root(root)
    except Refused as exc:
        result.refused.append(RefusedFile(path=ROOT_PATH, reason=str(exc)))
        return result
    walker = _Walker(max_file_bytes, max_files)
    try:
        walker.walk(root_fd, "", 0)
    finally:
        os.close(root_fd)
    files = sorted(walker.files)
    within, over_total = _within_total(files[:max_files], max_total_bytes)
    result.files, result.renamed, clashes = _portable([Deliverable(rel, root / rel, size) for rel, size in within])
    result.refused = sorted(walker.refused + clashes + over_total + _over_count(files[max_files:], max_files), key=lambda r: r.path)
    return result


def _within_total(files: list[tuple[str, int]], max_total: int | None) -> tuple[list[tuple[str, int]], list[RefusedFile]]:
    """Files in name order while their apparent sizes add up to at most `max_total`; the rest refused."""
    if max_total is None:
        return files, []
    kept, refused, total = [], [], 0
    for rel, size in files:
        if total + size > max_total:
            refused.append(RefusedFile(path=rel, reason=f"over the total size cap of the sample ({max_total} bytes)"))
            continue
        total += size
        kept.append((rel, size))
    return kept, refused


def _over_count(extra: list[tuple[str, int]], max_files: int) -> list[RefusedFile]:
    reason = f"over the count cap ({max_files} files)"
    refused = [RefusedFile(path=rel, reason=reason) for rel, _ in extra[:MAX_COUNT_REFUSALS]]
    if len(extra) > MAX_COUNT_REFUSALS:
        first_unlisted = extra[MAX_COUNT_REFUSALS][0]
        more = len(extra) - MAX_COUNT_REFUSALS - 1
        refused.append(RefusedFile(path=first_unlisted, reason=f"{reason}; {more} more after this one not listed"))
    return refused


@contextmanager
def _open_beneath(root: Path, relpath: str) -> Iterator[int]:
    """A read descriptor for `relpath` reached without following any symlink on the way."""
    check_relpath(relpath)
    fds: list[int] = []
    try:
        _open_chain(root, relpath.split("/"), fds)
        yield fds[-1]
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _open_chain(root: Path, parts: list[str], fds: list[int]) -> None:
    try:
        fds.append(_open_root(root))
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], _FILE_FLAGS, dir_fd=fds[-1]))
    except OSError as exc:
        raise Refused(f"changed after collection and no longer a plain file path ({exc.strerror})") from None


def _read_capped(fd: int, out, limit: int) -> int:
    """Copy at most `limit` bytes and say how many; a file that grew past the cap is refused."""
    copied = 0
    while chunk := os.read(fd, CHUNK):
        copied += len(chunk)
        if copied > limit:
            raise Refused(f"grew over the size cap ({limit} bytes) after collection")
        out.write(chunk)
    return copied


def _upload_one(root: Path, relpath: str, storage: Storage, key: str, max_bytes: int) -> int:
    """Upload one file of at most `max_bytes`; the bytes uploaded."""
    with _open_beneath(root, relpath) as fd:
        st = os.fstat(fd)
        _check_file_stat(st, max_bytes)
        if st.st_size <= IN_MEMORY_BYTES:
            buf = _Buffer()
            copied = _read_capped(fd, buf, max_bytes)
            storage.put_bytes(key, bytes(buf.data))
            return copied
        with tempfile.NamedTemporaryFile(prefix="gdpval-deliverable-") as tmp:
            copied = _read_capped(fd, tmp, max_bytes)
            tmp.flush()
            storage.put_file(key, Path(tmp.name))
            return copied


class _Buffer:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, chunk: bytes) -> None:
        self.data += chunk


def upload(collected: Collected, storage: Storage, prefix: str) -> list[str]:
    """Copy each collected file to `prefix/<portable relpath>`; return the relative paths uploaded.

    A file that changed after `collect` into something other than a plain file within the
    size cap (a symlink, a fifo, a path through a swapped-in symlinked folder) is refused and
    appended to `collected.refused` instead of being read.
    """
    uploaded: list[str] = []
    base = prefix.rstrip("/")
    budget = collected.max_total_bytes
    for item in collected.files:
        key = f"{base}/{item.key}" if base else item.key
        cap = collected.max_file_bytes if budget is None else min(collected.max_file_bytes, budget)
        try:
            copied = _upload_one(collected.root, item.relpath, storage, key, cap)
        except Refused as exc:
            collected.refused.append(RefusedFile(path=item.relpath, reason=str(exc)))
            continue
        uploaded.append(item.key)
        if budget is not None:
            budget -= copied
    return uploaded

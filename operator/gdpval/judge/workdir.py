"""The judges' work folders: copies of deliverables, references and the gold, held while a pair or a
sample is judged. Each folder's name carries its process id, so the next judging removes what a
killed one left (kill -9 runs no cleanup), and a SIGTERM removes this process's own before it exits.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from types import FrameType

PREFIX = "gdpval-"
KINDS = ("pairwise", "judge")
_NAME = re.compile(rf"^{PREFIX}(?:{'|'.join(KINDS)})-(?:(?P<pid>\d+)-)?")


def work_folder(kind: str) -> tempfile.TemporaryDirectory[str]:
    """A folder of this process's, removed when the block ends however it ends (kill -9 aside)."""
    return tempfile.TemporaryDirectory(prefix=f"{PREFIX}{kind}-{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_left_behind(root: str | None = None, own: bool = False) -> list[Path]:
    """Remove the work folders of judgings that are gone (a name without a pid is an older version's:
    gone too); with `own`, this process's as well. Returns what was removed."""
    removed = []
    base = Path(root or tempfile.gettempdir())
    for path in base.glob(f"{PREFIX}*"):
        match = _NAME.match(path.name)
        if match is None or not path.is_dir() or path.is_symlink():
            continue
        pid = int(match["pid"]) if match["pid"] else None
        if pid is None or (pid == os.getpid() and own) or (pid != os.getpid() and not _alive(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def remove_own_on_sigterm() -> None:
    """From the main thread: a SIGTERM removes this process's folders, then ends it as SIGTERM would."""

    def handler(signum: int, frame: FrameType | None) -> None:
        remove_left_behind(own=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, handler)

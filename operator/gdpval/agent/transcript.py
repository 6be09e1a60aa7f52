"""An append-only JSONL record of one attempt: every request, response, tool call and error."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class Transcript:
    """Flushed line by line so a crash leaves every event up to the crash readable."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8", errors="backslashreplace")

    def event(self, kind: str, **fields: Any) -> None:
        line = {"t": round(time.time(), 3), "event": kind, **fields}
        self._file.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

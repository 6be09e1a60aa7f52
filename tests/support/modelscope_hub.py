"""A local stand-in for the ModelScope hub, enough for the `modelscope` package's download path.

It serves one dataset folder (Hugging Face layout) as the repository `owner/name`, at one commit
that is also reachable as branch `master`. Endpoints, all under /api/v1:

- GET datasets/<owner>/<name>                      repository info (`Data.Id` is the hub's own id)
- GET datasets/<id>/repo/tree?Revision&Root&...    file listing, paged by PageNumber/PageSize;
                                                   entries carry Path, Size, Sha256, Revision
                                                   (commit id) and CommittedDate
- GET datasets/<owner>/<name>/repo?Revision&FilePath   the file bytes (Range honoured)
- GET repos/internalAccelerationInfo               404: no cloud-region acceleration here

Anything else answers 404 with the hub's JSON error shape. Every request is recorded in
`requests` so tests can check what was fetched and how often.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

HUB_ID = 4242
COMMITTED_AT = 1_735_689_600


class StandinHub:
    """Serve `root` as dataset `repo_id` at `commit`; use as a context manager."""

    def __init__(self, root: Path, repo_id: str = "openai-mirror/gdpval", commit: str = "c0ffee" * 6 + "abcd"):
        self.root = root
        self.repo_id = repo_id
        self.commit = commit
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StandinHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self, file_path: str) -> int:
        """How many times `file_path` was downloaded."""
        return sum(1 for path, query in self.requests if path.endswith("/repo") and query.get("FilePath") == file_path)

    def entries(self) -> list[dict[str, object]]:
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        return [self._entry(p) for p in files]

    def _entry(self, path: Path) -> dict[str, object]:
        rel = path.relative_to(self.root).as_posix()
        data = path.read_bytes()
        return {
            "Name": path.name,
            "Path": rel,
            "Type": "blob",
            "Size": len(data),
            "Sha256": hashlib.sha256(data).hexdigest(),
            "Revision": self.commit,
            "CommittedDate": COMMITTED_AT,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                hub.requests.append((unquote(url.path), query))
                hub._route(self, unquote(url.path), query)

        return Handler

    def _route(self, handler: BaseHTTPRequestHandler, path: str, query: dict[str, str]) -> None:
        prefix = "/api/v1/datasets/"
        if path == f"{prefix}{self.repo_id}":
            return _json(handler, 200, {"Id": HUB_ID, "Type": 0, "Name": self.repo_id.split("/")[1]})
        if path == f"{prefix}{HUB_ID}/repo/tree":
            return self._tree(handler, query)
        if path == f"{prefix}{self.repo_id}/repo":
            return self._file(handler, query)
        return _json(handler, 404, None, f"not found: {path}")

    def _known(self, revision: str | None) -> bool:
        return revision in ("master", self.commit)

    def _tree(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        if not self._known(query.get("Revision")):
            return _json(handler, 404, None, f"revision {query.get('Revision')} not found")
        root = query.get("Root", "/").strip("/")
        entries = [e for e in self.entries() if not root or str(e["Path"]).startswith(root + "/")]
        size = int(query.get("PageSize", 100))
        start = (int(query.get("PageNumber", 1)) - 1) * size
        _json(handler, 200, {"Files": entries[start : start + size]})

    def _file(self, handler: BaseHTTPRequestHandler, query: dict[str, str]) -> None:
        rel = query.get("FilePath", "")
        file = (self.root / rel).resolve()
        if not self._known(query.get("Revision")) or self.root.resolve() not in file.parents or not file.is_file():
            return _json(handler, 404, None, f"file {rel} not found")
        data = file.read_bytes()
        start = _range_start(handler.headers.get("Range"))
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.end_headers()
        handler.wfile.write(data[start:])


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header[6:].split("-")[0] or 0)


def _json(handler: BaseHTTPRequestHandler, status: int, data: object, message: str = "") -> None:
    body = json.dumps({"Code": status, "Data": data, "Message": message, "Success": status == 200}).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)

"""A GDPval repository on the ModelScope hub, through the `modelscope` package's hub API.

Only two kinds of call are made: the dataset file listing (which also carries the commit id that
last touched each file, used to pin the revision) and single-file downloads. The endpoint comes
from MODELSCOPE_ENDPOINT or the older MODELSCOPE_DOMAIN, else the library's default site.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import requests

from gdpval.dataset.errors import DatasetError
from gdpval.dataset.parquet import split_files
from gdpval.dataset.references import Absent
from gdpval.settings import DEFAULT_DATASET

PAGE_SIZE = 200
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
T = TypeVar("T")


def hub_endpoint() -> str | None:
    """The configured hub endpoint, or None to let the library pick its default site."""
    value = (os.environ.get("MODELSCOPE_ENDPOINT") or os.environ.get("MODELSCOPE_DOMAIN") or "").strip()
    if not value:
        return None
    return value if value.lower().startswith(("http://", "https://")) else f"https://{value}"


class ModelScopeRepo:
    kind = "modelscope"

    def __init__(self, repo_id: str, revision: str | None, endpoint: str | None = None, max_retries: int = 5):
        from modelscope.hub.api import HubApi

        self.location = repo_id
        self.requested = revision or "master"
        self.api = HubApi(endpoint=endpoint or hub_endpoint(), max_retries=max_retries)
        self.endpoint: str = self.api.endpoint
        self.endpoint = self._call(lambda: self.api.resolve_endpoint_for_read(repo_id, repo_type="dataset"))
        self.hub_id = self._call(self._hub_id)
        self.files = self._call(self._list_files, revision=self.requested)
        self.revision = self._pin()

    def _describe(self) -> str:
        return f"ModelScope dataset {self.location!r} at {self.endpoint}"

    def _call(self, fn: Callable[[], T], revision: str | None = None) -> T:
        """Run one hub call, turning its failures into a DatasetError that says what to fix."""
        try:
            return fn()
        except Exception as exc:
            raise _hub_error(exc, self._describe(), revision) from None

    def _hub_id(self) -> Any:
        owner, name = self.location.split("/", 1)
        return self.api.get_dataset_id_and_type(dataset_name=name, namespace=owner, endpoint=self.endpoint)[0]

    def _list_files(self) -> dict[str, dict[str, Any]]:
        """Every blob of the repository at the requested revision, by path."""
        entries: list[dict[str, Any]] = []
        page = 1
        while True:
            batch = self.api.get_dataset_files(
                self.location,
                revision=self.requested,
                root_path="/",
                recursive=True,
                page_number=page,
                page_size=PAGE_SIZE,
                endpoint=self.endpoint,
                dataset_hub_id=self.hub_id,
            )
            entries.extend(batch)
            if len(batch) < PAGE_SIZE:
                break
            page += 1
        return {_path(e): e for e in entries if e.get("Type", "blob") != "tree" and _path(e)}

    def _pin(self) -> str:
        """A commit id: the one asked for, else the newest commit among the files listed."""
        if _COMMIT.match(self.requested):
            return self.requested
        commits = [(int(e.get("CommittedDate") or 0), e.get("Revision") or "") for e in self.files.values()]
        commits = [c for c in commits if c[1]]
        return max(commits)[1] if commits else self.requested

    def parquet_names(self, split: str) -> list[str]:
        chosen = split_files(self.files, split)
        if not chosen:
            raise DatasetError(
                f"{self._describe()} has no parquet file for split {split!r} under data/ at revision "
                f"{self.requested}: check --dataset, --revision and the split"
            )
        return chosen

    def download(self, path: str, dest: Path) -> None:
        """Fetch one file of the pinned revision to `dest`; raises Absent when the hub lacks it."""
        if path not in self.files:
            raise Absent(path)
        staging = dest.parent / f".dl-{uuid.uuid4().hex}"
        try:
            fetched = Path(self._fetch(path, staging))
            self._verify(path, fetched)
            os.replace(fetched, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _fetch(self, path: str, staging: Path) -> str:
        from modelscope.hub.file_download import dataset_file_download

        try:
            return dataset_file_download(
                self.location,
                path,
                revision=self.revision,
                local_dir=str(staging),
                cache_dir=str(staging / ".cache"),
                endpoint=self.endpoint,
            )
        except Exception as exc:
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                raise Absent(path) from None
            raise _hub_error(exc, f"downloading {path} from {self._describe()}", self.revision) from None

    def _verify(self, path: str, file: Path) -> None:
        """Compare size and SHA-256 with the listing, so a truncated download is never cached."""
        entry = self.files[path]
        size, sha = entry.get("Size"), entry.get("Sha256")
        if size is not None and file.stat().st_size != int(size):
            raise DatasetError(f"{path} from {self._describe()} has {file.stat().st_size} bytes, not {size}: retry")
        if sha and _sha256(file) != sha:
            raise DatasetError(f"{path} from {self._describe()} does not match its SHA-256 checksum: retry")


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _path(entry: dict[str, Any]) -> str:
    return (entry.get("Path") or entry.get("Name") or "").lstrip("/")


def _hub_error(exc: Exception, what: str, revision: str | None) -> DatasetError:
    """One line that says whether the id, the revision, the login or the connection is wrong."""
    from modelscope_hub.errors import AuthenticationError, NetworkError, NotExistError, RequestTimeoutError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, NotExistError) or status == 404:
        if revision:
            return DatasetError(f"{what} has no revision {revision!r}: check --revision (a branch, tag or commit)")
        return DatasetError(f"{what} not found: check the dataset id (the default is {DEFAULT_DATASET})")
    if isinstance(exc, AuthenticationError) or status in (401, 403):
        return DatasetError(f"{what}: access denied; log in with `modelscope login` or set MODELSCOPE_API_TOKEN")
    if isinstance(exc, (NetworkError, RequestTimeoutError, requests.ConnectionError, requests.Timeout)):
        return DatasetError(f"{what}: the hub is unreachable; check the network or MODELSCOPE_ENDPOINT")
    return DatasetError(f"{what}: {type(exc).__name__}: {exc}")

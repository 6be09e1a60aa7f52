"""The one way to open a run's output: a local folder or S3 with the run's own endpoint and keys."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gdpval.settings import OutputSettings
from gdpval.storage.base import Storage, StorageError


def open_storage(output: OutputSettings | str, credentials: Mapping[str, str] | None = None) -> Storage:
    """A local folder path or `s3://bucket/prefix`.

    Endpoint, region and keys come from `output` and `credentials` when given, else from the usual
    AWS environment (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...).
    """
    if isinstance(output, str):
        output = OutputSettings(url=output)
    if output.url.startswith("s3://"):
        from gdpval.storage.s3 import S3Storage, s3_client

        return S3Storage.from_uri(output.url, s3_client(output.endpoint, output.region, credentials))
    if "://" in output.url:
        raise StorageError(f"unsupported output {output.url!r}: use a local folder or s3://bucket/prefix")
    from gdpval.storage.local import LocalStorage

    return LocalStorage(Path(output.url))

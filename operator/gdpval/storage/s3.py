"""S3 storage through boto3; works with S3-compatible servers (path-style addressing)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

from gdpval.storage.base import NotFound, Storage, StorageError

DOWNLOAD_CHUNK = 1 << 20


def parse_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise StorageError(f"{uri!r} is not an s3:// URI")
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise StorageError(f"{uri!r} has no bucket: use s3://bucket/prefix")
    return bucket, prefix.strip("/")


def s3_client(endpoint_url: str | None = None, region: str | None = None, credentials: Mapping[str, str] | None = None):
    """The one S3 client of the project (runner, pods, operator): retries, timeouts, path-style addressing.

    Credentials are `{"access_key_id": ..., "secret_access_key": ...}` (a run's Secret, read by
    the operator) or, when absent, the usual AWS chain.
    """
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    keys = {}
    if credentials is not None:
        keys = {"aws_access_key_id": credentials["access_key_id"], "aws_secret_access_key": credentials["secret_access_key"]}
    addressing = "path" if endpoint_url else "auto"
    config = Config(
        s3={"addressing_style": addressing},
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=32,  # the operator reads many attempts at once (controller/fanout.py)
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        config=config,
        **keys,
    )


class S3Storage(Storage):
    def __init__(self, bucket: str, prefix: str, client=None):
        self.bucket = bucket
        self.prefix = prefix
        self.client = client or s3_client()
        self.uri = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"

    @classmethod
    def from_uri(cls, uri: str, client=None) -> S3Storage:
        bucket, prefix = parse_s3_uri(uri)
        return cls(bucket, prefix, client)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, exc: Exception, key: str) -> StorageError:
        if isinstance(exc, ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NotFound"):
                return NotFound(f"{self.url(key)} does not exist")
            if code == "NoSuchBucket":
                return StorageError(f"bucket {self.bucket!r} does not exist: create it or fix the output URI")
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return StorageError(f"access to s3://{self.bucket} denied ({code}): check the AWS credentials")
        if isinstance(exc, NoCredentialsError):
            return StorageError("no AWS credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile")
        if isinstance(exc, EndpointConnectionError):
            return StorageError(f"cannot reach the S3 endpoint: {exc}; check AWS_ENDPOINT_URL")
        return StorageError(f"S3 error on {self.url(key)}: {exc}")

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, key) from None

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, key) from None
        except boto3.exceptions.S3UploadFailedError as exc:
            raise StorageError(f"upload of {path} to {self.url(key)} failed: {exc}") from None

    def get_bytes(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, key) from None

    def get_file(self, key: str, dest: Path) -> None:
        """One streamed GET: `download_file` adds a HEAD and a transfer manager's threads to every file,
        a round trip and a start-up cost that each sample pod's `stage` paid per reference (issue 11)."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".tmp-{dest.name}")
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"]
            with body, tmp.open("wb") as out:
                for chunk in body.iter_chunks(DOWNLOAD_CHUNK):
                    out.write(chunk)
            tmp.replace(dest)
        except (ClientError, BotoCoreError) as exc:
            tmp.unlink(missing_ok=True)
            raise self._fail(exc, key) from None

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except (ClientError, BotoCoreError) as exc:
            err = self._fail(exc, key)
            if isinstance(err, NotFound):
                return False
            raise err from None

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, key) from None

    def list(self, prefix: str) -> Iterator[str]:
        full = self._key(prefix).rstrip("/") + "/"
        strip = len(self.prefix) + 1 if self.prefix else 0
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(obj["Key"][strip:] for obj in page.get("Contents", ()))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail(exc, prefix) from None
        return iter(sorted(keys))

    def check(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("404", "NoSuchBucket", "NotFound"):
                raise StorageError(f"bucket {self.bucket!r} does not exist: create it or fix the output URI") from None
            raise self._fail(exc, "") from None
        except BotoCoreError as exc:
            raise self._fail(exc, "") from None

"""Shared fixtures backed by real servers: MinIO (`s3`, `s3_env`) and the local cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# `infra` is importable whether or not tests/ becomes a package later.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from infra.minio import MinioServer  # noqa: E402

_AWS_VARS_TO_CLEAR = ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION")


@pytest.fixture(scope="session")
def s3():
    """A MinIO server on 127.0.0.1 for this session (one per xdist worker)."""
    server = MinioServer(host="127.0.0.1").start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3, monkeypatch):
    """Point os.environ's AWS variables at the session MinIO for one test."""
    for name in _AWS_VARS_TO_CLEAR:
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    return s3.env()

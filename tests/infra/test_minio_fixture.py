"""The MinIO fixtures talk to a real S3 server."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.s3


def test_bucket_roundtrip(s3):
    bucket = s3.make_bucket()
    assert bucket != s3.make_bucket()
    client = s3.client()
    client.put_object(Bucket=bucket, Key="a/b.txt", Body=b"hello")
    assert client.get_object(Bucket=bucket, Key="a/b.txt")["Body"].read() == b"hello"
    assert s3.endpoint_url.startswith("http://127.0.0.1:")
    assert s3.region == "us-east-1"


def test_named_bucket(s3):
    assert s3.make_bucket("named-bucket-for-test") == "named-bucket-for-test"


def test_s3_env_reaches_server_from_subprocess(s3, s3_env):
    bucket = s3.make_bucket()
    assert os.environ["AWS_ENDPOINT_URL"] == s3.endpoint_url
    code = f"import boto3,sys;c=boto3.client('s3');c.put_object(Bucket='{bucket}',Key='k',Body=b'v');print([b['Name'] for b in c.list_buckets()['Buckets']])"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert bucket in out.stdout
    assert s3.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_server_dies_with_a_killed_test_process(minio_binary, tmp_path):
    """A SIGKILLed pytest leaves no MinIO behind (the server gets SIGKILL with its parent)."""
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from infra.minio import MinioServer; s = MinioServer(host='127.0.0.1').start();"
        "print(s._proc.pid, flush=True); time.sleep(600)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, tests_dir], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    raise AssertionError("MinIO outlived the process that started it")

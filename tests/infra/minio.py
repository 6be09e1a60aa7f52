"""A real MinIO server for tests: cached binary, free port, generated credentials, temp data."""

from __future__ import annotations

import ctypes
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .paths import HACK, minio_binary

REGION = "us-east-1"


def ensure_minio_binary() -> Path:
    """Return the pinned MinIO binary, building it (cached, under a lock) if missing."""
    binary = minio_binary()
    if not binary.exists():
        subprocess.run([str(HACK / "build-tools.sh"), "minio"], check=True)
    if not binary.exists():
        raise RuntimeError(f"hack/build-tools.sh minio did not produce {binary}")
    return binary


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class MinioServer:
    """One MinIO process. `host` must be a local address (loopback, or the cluster's node IP)."""

    host: str = "127.0.0.1"
    region: str = REGION
    access_key: str = field(default_factory=lambda: "test-" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    port: int = 0
    data_dir: Path | None = None
    log_path: Path | None = None
    _proc: subprocess.Popen | None = None
    _own_data_dir: bool = False

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> MinioServer:
        binary = ensure_minio_binary()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="gdpval-minio-"))
            self._own_data_dir = True
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.data_dir),
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_REGION": self.region,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
            "MINIO_CALLHOME_ENABLE": "off",
        }
        # A port picked free can be taken before MinIO binds it; retry with a new one.
        for _ in range(5):
            self.port = free_port(self.host)
            console = free_port(self.host)
            log = open(self.log_path, "ab")
            self._proc = subprocess.Popen(
                [
                    str(binary),
                    "server",
                    "--quiet",
                    "--address",
                    f"{self.host}:{self.port}",
                    "--console-address",
                    f"{self.host}:{console}",
                    str(self.data_dir / "data"),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            log.close()
            if self._wait_ready(timeout):
                return self
            self.stop(keep_data=True)
        raise RuntimeError(f"MinIO did not become ready on {self.host}; log: {self.log_text()}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        url = f"{self.endpoint_url}/minio/health/ready"
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def log_text(self) -> str:
        if self.log_path and self.log_path.exists():
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def stop(self, keep_data: bool = False) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if not keep_data and self._own_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            if self.log_path is not None:
                self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> MinioServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self):
        """A boto3 S3 client bound to this server (path-style, as MinIO expects)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}),
        )

    def make_bucket(self, name: str | None = None) -> str:
        """Create a fresh bucket; without a name, a unique one is generated."""
        name = name or f"test-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def env(self) -> dict[str, str]:
        """AWS variables that point an S3 client (boto3, the operator, a pod) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": self.region,
        }


def die_with_parent() -> None:
    """In the child: SIGKILL it when the test process dies, even by SIGKILL (no orphaned servers)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)

"""An S3-compatible server for the storage tests: moto's standalone server, a real process
on 127.0.0.1 (docs/storage.md says why this one), with a bucket of its own per test."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from archiver.conf import Settings
from tests.conftest import free_port

ACCESS_KEY = "archiver-test-access"
SECRET_KEY = "s3cr3t-Value-That-Must-Never-Show-0123456789"
_buckets = itertools.count(1)


def moto_command() -> str:
    found = Path(sys.executable).with_name("moto_server")
    if found.exists():
        return str(found)
    binary = shutil.which("moto_server")
    if binary is None:
        pytest.fail("moto_server is missing: pip install 'moto[server]' (the test extra)")
    return binary


@pytest.fixture
def data_dir():
    # Short, so the wake socket's path fits a Unix socket address.
    path = Path(tempfile.mkdtemp(prefix="as3-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """http://127.0.0.1:<port> of a moto server started for this session."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")  # noqa: SIM115
    server = subprocess.Popen([moto_command(), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()  # noqa: S310
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                log.close()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    yield url
    server.terminate()
    server.wait(timeout=10)
    log.close()


def client_for(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY, config=Config(s3={"addressing_style": "path"}))


@pytest.fixture
def bucket(s3_endpoint) -> str:
    """A new, empty bucket on the moto server."""
    name = f"archives-{next(_buckets)}-{int(time.time() * 1000) % 100000}"
    client = client_for(s3_endpoint)
    client.create_bucket(Bucket=name)
    client.close()
    return name


@pytest.fixture
def s3(s3_endpoint, bucket):
    """A boto3 client of the test's bucket's server (the test's own view of the bucket)."""
    client = client_for(s3_endpoint)
    yield client
    client.close()


def storage_env(endpoint: str, bucket: str, prefix: str = "archiver") -> dict[str, str]:
    return {"ARCHIVER_STORAGE_URL": f"s3://{bucket}/{prefix}", "ARCHIVER_STORAGE_ENDPOINT": endpoint,
            "ARCHIVER_STORAGE_ACCESS_KEY": ACCESS_KEY, "ARCHIVER_STORAGE_SECRET_KEY": SECRET_KEY}


def storage_settings(data_dir: Path, endpoint: str, bucket: str, **more) -> Settings:
    return Settings(data_dir=data_dir, launcher="local", poll_interval=0.2, lease_seconds=5,
                    storage_url=f"s3://{bucket}/archiver", storage_endpoint=endpoint,
                    storage_access_key=ACCESS_KEY, storage_secret_key=SECRET_KEY, **more)

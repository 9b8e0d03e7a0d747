"""An S3-compatible server for the storage tests: moto's standalone server, a real process
on 127.0.0.1 (docs/storage.md says why this one), with a bucket of its own per test."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.s3server import MotoMissing, MotoServer, client_for, new_bucket


@pytest.fixture
def data_dir():
    # Short, so the wake socket's path fits a Unix socket address.
    path = Path(tempfile.mkdtemp(prefix="as3-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """http://127.0.0.1:<port> of a moto server started for this session."""
    try:
        server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    except (MotoMissing, RuntimeError) as exc:
        pytest.fail(str(exc))
    yield server.url
    server.stop()


@pytest.fixture
def bucket(s3_endpoint) -> str:
    """A new, empty bucket on the moto server."""
    return new_bucket(s3_endpoint)


@pytest.fixture
def s3(s3_endpoint, bucket):
    """A boto3 client of the test's bucket's server (the test's own view of the bucket)."""
    client = client_for(s3_endpoint)
    yield client
    client.close()

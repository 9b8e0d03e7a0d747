"""Fixtures of the chaos trials: a short temp root for data dirs, a fresh PostgreSQL database."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.pg import SKIP_REASON, fresh_database, server_url, skip_commit_flush


@pytest.fixture
def chaos_root():
    # Short, so the daemons' wake sockets fit a Unix socket address.
    path = Path(tempfile.mkdtemp(prefix="achaos-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def postgres_url():
    url = server_url()
    if not url:
        pytest.skip(SKIP_REASON)
    with fresh_database(url) as database_url:
        skip_commit_flush(database_url)
        yield database_url

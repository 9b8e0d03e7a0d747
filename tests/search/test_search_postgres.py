"""tests/search/test_search.py again on a real PostgreSQL: the tsvector column, its GIN index,
ts_rank_cd and ts_headline answer the same queries as SQLite's FTS5."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import claimers
from tests.pg import SKIP_REASON, fresh_database, server_url


def pytest_on_postgresql(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """pytest run in a child on a fresh PostgreSQL database."""
    url = server_url()
    if url is None:
        pytest.skip(SKIP_REASON)
    with fresh_database(url) as database_url:
        env = claimers.child_env(database_url, tmp_path)
        env["PYTHONPATH"] = f"{claimers.ROOT}:{Path(claimers.ROOT) / 'crawler'}"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider"],
            cwd=Path(claimers.ROOT), env=env, capture_output=True, text=True, timeout=400,
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    return done


@pytest.mark.postgres
def test_search_behaves_the_same_on_postgresql(tmp_path):
    done = pytest_on_postgresql(tmp_path, "tests/search/test_search.py", "tests/search/test_search_groups.py")
    assert " passed" in done.stdout and "skipped" not in done.stdout


@pytest.mark.postgres
def test_search_costs_are_bounded_and_its_parser_fuzzed_on_postgresql(tmp_path):
    done = pytest_on_postgresql(tmp_path, "tests/search/test_search_cost.py",
                                "tests/search/test_search_fuzz.py", "-rs")
    # Only the SQLite work budget's own tests are skipped there.
    assert done.stdout.count("SKIPPED") == done.stdout.count("SQLite's work budget") == 3

"""Four OS processes claim the same 10,000 due crawls at once: every crawl is won exactly once.

On SQLite the processes share a file database in a temp dir, migrated with manage.py; on
PostgreSQL (marker `postgres`) a fresh database on the server that
ARCHIVER_TEST_POSTGRES_URL names, dropped afterwards. The rows are real Crawl rows, so the
index and the claim SQL under test are the production ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import claimers
from tests.pg import SKIP_REASON, fresh_database, server_url, skip_commit_flush

ROWS = 10_000
PROCESSES = 4

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def queue(request, tmp_path_factory) -> tuple[dict[str, str], set[str]]:
    """(child environment, crawl ids) of a migrated database holding ROWS due crawls."""
    tmp = tmp_path_factory.mktemp(f"claims-{request.param}")
    if request.param == "sqlite":
        env = claimers.child_env(f"sqlite:///{tmp}/archiver.sqlite3", tmp)
        claimers.migrate(env)
        yield env, claimers.seed(env, ROWS)
        return
    url = server_url()
    if url is None:
        pytest.skip(SKIP_REASON)
    with fresh_database(url) as database_url:
        # Without it, 10,000 one-row claims wait for 10,000 disk flushes (see bench/claims.py).
        skip_commit_flush(database_url)
        env = claimers.child_env(database_url, tmp)
        claimers.migrate(env)
        yield env, claimers.seed(env, ROWS)


@pytest.mark.parametrize("batch", [1, 7])
def test_concurrent_claimers_win_every_crawl_exactly_once(queue, batch):
    env, crawls = queue
    claimers.run_module(env, "requeue")

    report = claimers.run_claimers(env, PROCESSES, batch)

    won = [{pk for pk, _ in run.claims} for run in report.runs]
    assert set().union(*won) == crawls
    assert sum(len(pks) for pks in won) == len(crawls), "some crawl was won by two processes"
    assert report.double_claims() == 0
    assert {token for _, token in report.claims} == {1}


@pytest.mark.postgres
def test_the_lease_rules_hold_on_postgresql(tmp_path):
    """tests/test_lease.py, run again through a real PostgreSQL connection."""
    url = server_url()
    if url is None:
        pytest.skip(SKIP_REASON)
    with fresh_database(url) as database_url:
        env = claimers.child_env(database_url, tmp_path)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/test_lease.py", "-q", "-p", "no:cacheprovider"],
            cwd=Path(claimers.ROOT), env=env, capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout

"""The database going away under a running daemon: a PostgreSQL cluster of the test's own
restarted mid-crawl or stopped, and SQLite locked by another writer (docs/runner.md,
"Outages")."""

from __future__ import annotations

import pytest

from tests import pg_cluster
from tests.chaos.trials import database_restart_trial

pytestmark = pytest.mark.slow

LOST_OR_TWICE = ("incomplete", "crawled_twice", "pages_twice", "pages_missing", "files_missing",
                 "archives_unrecorded", "wacz_invalid", "webhook_events_missing")


@pytest.fixture
def cluster():
    if reason := pg_cluster.missing():
        pytest.skip(reason)
    with pg_cluster.PrivateCluster.start() as cluster:
        yield cluster


def test_a_postgresql_restart_mid_crawl_loses_and_repeats_nothing(chaos_root, cluster):
    result = database_restart_trial(chaos_root, cluster, crawls=3, later=2, pages=12,
                                    delay=0.3, timeout=60)
    counts = {key: result[key] for key in LOST_OR_TWICE}
    assert counts == dict.fromkeys(counts, 0), result
    assert result["crawls"] == 5  # the 2 added after the restart started and completed too
    assert result["running_at_restart"] >= 1, result  # else the restart was not mid-crawl
    assert result["daemon_alive"], result
    assert result["tracebacks"] == 0, result.get("log_tail")
    # Logged when it starts and when it ends, not per tick: a handful of lines.
    assert result["outage_lines"] <= 12, result.get("log_tail")

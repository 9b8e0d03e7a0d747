"""A tick slowed by heavy work (a 25 s step standing for packaging, ingest, keeping
archives) neither lets its crawl's lease lapse nor lets a second runner take the crawl over:
leases and the heartbeat are renewed off the tick (runner/lease_keeper.py, issue 40). Two
real daemons on one PostgreSQL database and one Redis; 5 s leases, so without the keeper the
lease lapses within the first slow tick and the slow runner is presumed dead after 20 s."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.chaos.harness import ROOT, RedisServer, Trial, chaos_site
from tests.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
SLOW_STEP = 25.0  # seconds: past 4 leases of 5 s, when a runner without heartbeat is dead


def lease(trial: Trial, crawl_id: str) -> tuple[str, int, bool]:
    """(owner, token, whether the lease is live on the database's clock)."""
    (row,) = trial.db.query("SELECT lease_owner, lease_token, retry_at > clock_timestamp() "
                            "FROM crawls_crawl WHERE id = %s", crawl_id)
    return row


def test_a_slow_tick_neither_lets_the_lease_lapse_nor_a_second_runner_take_over(chaos_root, postgres_url):
    redis = RedisServer.start(chaos_root / "redis")
    try:
        with chaos_site(trees=1, pages=300, delay=1.0) as site, \
                Trial(chaos_root, database_url=postgres_url, redis=redis, webhooks=False) as trial:
            a, b = trial.add_data_dir(), trial.add_data_dir()
            trial.migrate()
            marker = chaos_root / "slow-ticks"
            log_path = chaos_root / "logs" / "a-slow-daemon.log"
            trial.logs.append(log_path)
            with log_path.open("w") as log:
                a.daemons.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.chaos.slow_tick_daemon", str(SLOW_STEP), str(marker)],
                    cwd=ROOT, env=a.env, stdout=log, stderr=subprocess.STDOUT))
            trial.daemon_ready(a)
            crawl_id = trial.add(a, site.tree_url(0))
            trial.start_daemon(b)
            trial.daemon_ready(b)
            trial.wait_crawl(crawl_id, lambda c: c["status"] == "running", timeout=60)
            (owner,) = trial.db.query("SELECT id FROM crawls_runnerrecord WHERE pid = %s", a.daemon.pid)[0]
            first = lease(trial, crawl_id)
            assert first[0] == owner
            samples: list[tuple[str, int, bool]] = []

            def two_slow_ticks_or_a_lapse() -> bool:
                samples.append(lease(trial, crawl_id))
                who, token, live = samples[-1]
                slow_ticks = len(marker.read_text().splitlines()) if marker.exists() else 0
                return slow_ticks >= 2 or (who, token) != first[:2] or not live

            wait_for(two_slow_ticks_or_a_lapse, timeout=4 * SLOW_STEP + 60, pause=0.25,
                     what="two slow ticks")

            takeovers = sum(1 for who, token, _ in samples if (who, token) != first[:2])
            lapses = sum(1 for _, _, live in samples if not live)
            assert (takeovers, lapses, trial.adopted(b)) == (0, 0, 0), trial.log_tail()
            stats = json.loads((a.path / "run" / "stats.json").read_text())
            assert stats["tick_max_ms"] >= SLOW_STEP * 1000 and stats["lease_renewal_max_late_s"] < 0, stats
    finally:
        redis.stop()

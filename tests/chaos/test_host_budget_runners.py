"""Two runners on one PostgreSQL database and one Redis server, each running a crawl of the
same host: together they stay inside ARCHIVER_HOST_RATE (issue 42)."""

from __future__ import annotations

import pytest

from crawls.models.statuses import CrawlStatus
from tests.chaos.harness import RedisServer, Trial, chaos_site

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def most_in(stamps: list[float], window: float) -> int:
    stamps = sorted(stamps)
    return max((sum(1 for s in stamps[i:] if s - t < window) for i, t in enumerate(stamps)),
               default=0)


def test_two_runners_crawling_one_host_share_its_rate(chaos_root, postgres_url):
    redis = RedisServer.start(chaos_root / "redis")
    try:
        with chaos_site(trees=2, pages=10) as site, \
                Trial(chaos_root, database_url=postgres_url, redis=redis, webhooks=False,
                      env={"ARCHIVER_HOST_RATE": "2",
                           "ARCHIVER_MAX_CONCURRENT_CRAWLS": "1"}) as trial:
            a, b = trial.add_data_dir(), trial.add_data_dir()
            trial.migrate()
            # Both queued first: each runner (one crawl at a time) claims one as it starts.
            ids = [trial.add(a, site.tree_url(0)), trial.add(b, site.tree_url(1))]
            for data_dir in (a, b):
                trial.start_daemon(data_dir)
            statuses = trial.wait_final(ids, 60)
            log = list(site.log)
    finally:
        redis.stop()
    assert set(statuses.values()) == {CrawlStatus.COMPLETE}, statuses
    trees = [[t for path, t in log if path.startswith(f"/t{k}/")] for k in (0, 1)]
    assert [len(tree) for tree in trees] == [11, 11]
    assert most_in([t for _, t in log], 5.0) <= 12
    # At the same time, so on both runners (each runs one crawl at a time): the rate was
    # shared, not taken in turns.
    both = (max(tree[0] for tree in trees), min(tree[-1] for tree in trees))
    assert all(sum(both[0] <= t <= both[1] for t in tree) >= 4 for tree in trees), [
        [round(t - log[0][1], 2) for t in tree] for tree in trees]

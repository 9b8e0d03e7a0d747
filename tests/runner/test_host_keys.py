"""Database 0 of the embedded Redis holds the crawls' shared host budget (issue 42) and
nothing else: a crawl's ACL user draws on the budget there, and the watch keeps its keys
while it drops anything else a crawler wrote there (runner/host_keys.py)."""

from __future__ import annotations

import asyncio

import redis
from archiver_crawler.hosts import HostBudget, Rates

from runner import host_keys
from runner.progress import ProgressStore
from runner.redis_server import RedisWatch
from tests.runner.step_helpers import later


def test_a_crawls_user_draws_on_the_budget_and_the_watch_keeps_it(embedded):
    admin = ProgressStore(embedded.ensure())
    crawl_url = admin.grant(5, "c1").url(5)  # the URL its crawler is given

    async def two_requests() -> None:
        budget = HostBudget.connect(crawl_url, Rates(default=1.0))
        try:
            for _ in range(2):  # a second apart: the second waits for its slot
                await budget.polite("example.org", lambda: asyncio.sleep(0),
                                    lambda _: (200, None), lambda _: False)
        finally:
            await budget.close()

    asyncio.run(two_requests())
    server = admin.client(0)
    assert server.keys("*") == ["host:example.org:next"]
    server.set("junk", "x" * 100)
    server.set("host:example.org:pause", "1", ex=60)
    server.set("host:big.test:next", "x" * 4096, ex=60)  # too big to be a time
    server.set("host:forever.test:next", "1")  # no time to live
    server.rpush("host:list.test:down", "x")
    RedisWatch(embedded, admin.endpoint).check(later(0))
    assert sorted(server.keys("*")) == ["host:example.org:next", "host:example.org:pause"]
    admin.close()


def test_past_its_bound_database_0_is_emptied(redis_server):
    client = redis.Redis.from_url(redis_server.url(0))
    client.flushdb()
    pipe = client.pipeline()
    for i in range(host_keys.MAX_KEYS + 1):
        pipe.set(f"host:h{i}.test:next", "1", ex=60)
    pipe.execute()
    assert host_keys.sweep(client) == host_keys.MAX_KEYS + 1
    assert client.dbsize() == 0
    client.close()

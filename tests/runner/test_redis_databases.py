"""The embedded Redis has as many databases as the concurrency needs (issue 40: 256 were
hard-coded, so past 255 crawls holding state new ones waited "no free Redis database").
Against real redis-server processes; no crawler is run."""

from __future__ import annotations

import json

import pytest

from crawls.models import Crawl
from runner.progress import ProgressStore
from runner.redis_server import databases_for
from runner.steps.claim import allocate_redis_db
from tests.fakes import FakeLauncher
from tests.runner.step_helpers import T0

pytestmark = pytest.mark.django_db
HELD = 300  # more crawls holding a database than the old 256 allowed




def databases(endpoint) -> int:
    client = endpoint.client()
    try:
        return int(client.config_get("databases")["databases"])
    finally:
        client.close()


def test_the_database_count_follows_the_concurrency(settings):
    assert databases_for(settings) == 256  # never fewer than before
    many = settings.model_copy(update={"max_concurrent_crawls": 1000})
    assert databases_for(many) > 1000 + 1  # every running crawl, database 0, and paused ones


def test_an_embedded_redis_for_300_crawls_has_a_database_for_each(settings, embedded_redis):
    settings = settings.model_copy(update={"max_concurrent_crawls": HELD})
    endpoint = embedded_redis(settings).ensure()
    assert databases(endpoint) == endpoint.databases == databases_for(settings) > HELD


def test_a_running_embedded_redis_with_too_few_databases_restarts_with_its_data(settings, embedded_redis):
    small = embedded_redis(settings).ensure()
    assert databases(small) == 256
    client = small.client(200)
    client.set("kept", "yes")
    client.close()

    larger = settings.model_copy(update={"max_concurrent_crawls": HELD})
    endpoint = embedded_redis(larger).ensure()

    assert databases(endpoint) == databases_for(larger)
    assert (endpoint.port, endpoint.password) == (small.port, small.password)  # crawlers' address holds
    client = endpoint.client(200)
    assert client.get("kept") == "yes"  # the append-only file brought the state back
    client.close()
    state = json.loads((settings.run_dir / "redis.json").read_text())
    assert state["port"] == small.port


def test_the_crawl_after_299_holders_gets_database_300(settings, embedded_redis, make_runner, make_crawl):
    settings = settings.model_copy(update={"max_concurrent_crawls": HELD})
    store = ProgressStore(embedded_redis(settings).ensure())
    runner = make_runner(FakeLauncher(), settings=settings, store=store)
    holders = [make_crawl() for _ in range(HELD - 1)]
    for db, crawl in enumerate(holders, start=1):
        Crawl.objects.filter(pk=crawl.pk).update(redis_db=db)
    crawl = make_crawl()
    (claim,) = Crawl.objects.filter(pk=crawl.pk).claim(runner.id, T0, settings.lease_seconds)

    try:
        assert allocate_redis_db(runner, crawl, claim.token) == HELD
    finally:
        store.close()
    crawl.refresh_from_db()
    assert crawl.redis_db == HELD

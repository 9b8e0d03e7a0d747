"""The crawler's side of the protocol for step tests on the in-memory launcher and store
(tests/fakes.py): a pinned clock, the keys an instance writes while it works, its end."""

from __future__ import annotations

import datetime as dt

import redis

from crawls.models import Crawl
from runner.launchers import hostname

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def later(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def keys(store, crawl: Crawl) -> redis.Redis:
    crawl.refresh_from_db()
    return store.client(crawl.redis_db)


def report(store, crawl: Crawl, instance: int = 0, status: str = "running", done: int = 0,
           found: int = 0, size: int = 0, pages=()) -> None:
    """What a crawler instance writes while it works."""
    r = keys(store, crawl)
    host = hostname(crawl.pk, instance)
    r.hset(f"{crawl.pk}:status", host, status)
    r.hset(f"{crawl.pk}:size", host, size)
    if done:
        r.set(f"{crawl.pk}:d", done)
    for i in range(found):
        r.sadd(f"{crawl.pk}:s", f"http://site/{i}")
    for url in pages:
        r.lpush(f"{crawl.pk}:pages", f'{{"url": "{url}", "title": "t", "status": 200, "depth": 1}}')


def end_instance(fake, store, crawl: Crawl, code: int, status: str | None, instance: int = 0,
                 wacz: bytes | None = None) -> None:
    """The instance writes its final status (and maybe its WACZ) and exits with `code`."""
    if status:
        keys(store, crawl).hset(f"{crawl.pk}:status", hostname(crawl.pk, instance), status)
    ref = next(r for r, f in fake.instances.items()
               if f.spec.crawl_id == crawl.pk and f.spec.instance == instance and f.running)
    if wacz is not None:
        spec = fake.instances[ref].spec
        folder = spec.instance_dir / "collections" / crawl.pk
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{crawl.pk}.wacz").write_bytes(wacz)
    fake.exit(ref, code, log="last words of the crawler")

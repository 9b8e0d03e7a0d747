"""A crawler cannot fill the Redis every crawl shares: the embedded server has a memory limit
(noeviction: writes over it fail, no crawl's state is evicted), and a crawl whose database
holds more than ARCHIVER_CRAWL_REDIS_MAX_BYTES stops with the reason `redis_budget`.
Against a real redis-server with an admin password, the crawl writing as its own ACL user."""

from __future__ import annotations

import pytest
import redis

from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlStatus, PayloadDigest, StopReason
from runner import launch
from runner.progress import ProgressStore
from runner.redis_server import RedisWatch
from tests.runner.step_helpers import end_instance, later, report

pytestmark = pytest.mark.django_db
MiB = 1 << 20


@pytest.fixture
def embedded(embedded_redis, settings):
    """A running embedded Redis with a 32 MiB memory limit."""
    server = embedded_redis(settings.model_copy(update={"redis_max_bytes": 32 * MiB}))
    server.ensure()
    return server


@pytest.fixture
def admin(embedded):
    store = ProgressStore(embedded.ensure())
    yield store
    store.close()


def fill(client: redis.Redis, key: str, total: int, value: bytes = b"x" * (64 << 10)) -> None:
    for _ in range(total // len(value)):
        client.rpush(key, value)


def test_the_embedded_redis_refuses_writes_over_its_memory_limit_and_evicts_nothing(admin):
    crawler = redis.Redis.from_url(admin.grant(5, "c1").url(5), socket_timeout=5)
    crawler.set("c1:d", 7)
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        fill(crawler, "c1:junk", 64 * MiB)
    assert crawler.get("c1:d") == b"7"  # nothing evicted to make room
    crawler.close()
    assert admin.client(0).config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}


def test_a_reused_embedded_redis_gets_its_memory_limit_again(embedded, admin):
    admin.client(0).config_set("maxmemory", 0)  # as started by a version without the limit
    embedded.ensure()
    assert admin.client(0).config_get("maxmemory") == {"maxmemory": str(32 * MiB)}


def own_client(store, crawl: Crawl) -> redis.Redis:
    """A connection as the crawl's crawlers have it: its own ACL user."""
    crawl.refresh_from_db()
    own = store.grant(crawl.redis_db, crawl.pk)
    assert own.username == f"crawl-{crawl.pk}"
    return redis.Redis.from_url(own.url(crawl.redis_db), socket_timeout=5)


def assert_cut_off(admin, crawl: Crawl, crawler: redis.Redis, db: int) -> None:
    """Its user gone or off, its connection closed, its keys dropped, the crawl ended."""
    user = admin.client(0).execute_command("ACL", "GETUSER", f"crawl-{crawl.pk}")
    assert user is None or "off" in user["flags"]
    with pytest.raises((redis.AuthenticationError, redis.ResponseError, redis.ConnectionError)):
        crawler.set(f"{crawl.pk}:more", "x")  # its old connection was killed; a new login is refused
    assert admin.client(db).dbsize() == 0
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (CrawlStatus.STOPPED_SIZE_LIMIT, StopReason.REDIS_BUDGET)
    assert crawl.logs.filter(message__contains="cut off").exists()


def test_a_crawl_whose_crawler_fills_its_redis_database_is_cut_off_with_the_reason(
        make_runner, make_crawl, fake, settings, admin):
    crawl = make_crawl()
    runner = make_runner(fake, settings=settings.model_copy(update={"crawl_redis_max_bytes": 2 * MiB}),
                         store=admin)
    runner.tick(later(0))
    crawler = own_client(admin, crawl)
    db = crawl.redis_db
    report(admin, crawl, done=1, found=2, pages=["http://site/a"])
    fill(crawler, f"{crawl.pk}:anything", 4 * MiB)

    runner.tick(later(20))  # measured every 15 s
    assert_cut_off(admin, crawl, crawler, db)
    assert crawl.logs.filter(message__contains="over the 2.1 MB a crawl may use").exists()
    assert crawl.pages_done == 1  # what it reported before is kept
    assert not any(instance.running for instance in fake.instances.values())
    crawler.close()


def test_a_crawler_filling_the_shared_redis_is_cut_off_on_the_next_tick_and_another_crawl_completes(
        make_runner, make_crawl, fake, settings, admin):
    """The server over half its maxmemory: every crawl is measured at every tick, not every
    15 s, so the culprit is cut off before the server refuses the others' writes."""
    hostile, other = make_crawl(), make_crawl()
    runner = make_runner(fake, settings=settings.model_copy(update={"crawl_redis_max_bytes": 2 * MiB}),
                         store=admin)
    runner.tick(later(0))
    crawler, neighbour = own_client(admin, hostile), own_client(admin, other)
    db = hostile.redis_db
    report(admin, other, done=0, found=20)
    fill(crawler, f"{hostile.pk}:junk", 20 * MiB)  # of the server's 32 MiB

    runner.tick(later(1))  # 1 s after the last measure
    assert_cut_off(admin, hostile, crawler, db)

    for i in range(20):  # the other crawl's crawler goes on writing, as its own user
        neighbour.lpush(f"{other.pk}:pages", f'{{"url": "http://site/{i}", "title": "t", "status": 200}}')
        neighbour.set(f"{other.pk}:d", i + 1)
    runner.tick(later(2))
    end_instance(fake, admin, other, 0, "done")
    runner.tick(later(3))
    other.refresh_from_db()
    assert (other.status, other.pages_done, other.snapshots.count()) == (CrawlStatus.COMPLETE, 20, 20)
    crawler.close()
    neighbour.close()


def test_a_crawl_within_its_redis_budget_runs_on(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(later(0))
    report(store, crawl, done=1, found=2, pages=["http://site/a"])
    runner.tick(later(20))
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (CrawlStatus.RUNNING, "")


def test_a_redis_that_cannot_measure_a_database_is_said_once_and_the_crawl_runs_on(
        make_runner, make_crawl, fake, memory_store):
    crawl = make_crawl()  # fakeredis has no MEMORY command, as a server that refuses it
    runner = make_runner(fake, store=memory_store)
    runner.tick(later(0))
    report(memory_store, crawl, done=1, found=2, pages=["http://site/a"])
    for second in (20, 40):
        runner.tick(later(second))
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (CrawlStatus.RUNNING, "")
    said = [e for e in runner.rt.events if "cannot measure" in e]
    assert len(said) == 1 and "not enforced" in said[0]


def kept_payloads(org, count: int, path: str = "page", name: str = "a") -> CrawlFile:
    """`count` payloads another crawl of the org kept (what a dedup crawl is handed)."""
    other = Crawl.create(org, CrawlConfig(seeds=["http://site/"]))
    Crawl.objects.filter(pk=other.pk).update(status=CrawlStatus.COMPLETE)
    kept = CrawlFile.objects.create(crawl=other, path=f"archives/{other.pk}/{name}.wacz", size=1,
                                    sha256=name * 64, payloads_indexed=True)
    PayloadDigest.objects.bulk_create(
        [PayloadDigest(org=org, digest=f"sha1:{name}{i:031d}", url=f"http://site/{path}-{i}.html",
                       date="2026-12-01T00:00:00Z", crawl_file=kept) for i in range(count)])
    return kept


def test_the_dedup_index_handed_to_a_crawl_does_not_count_against_its_crawlers_budget(
        make_runner, make_crawl, fake, settings, admin, org):
    kept_payloads(org, 20_000)  # about 4 MB in Redis, twice the budget
    crawl = make_crawl(dedup=True)
    runner = make_runner(fake, settings=settings.model_copy(update={"crawl_redis_max_bytes": 2 * MiB}),
                         store=admin)
    runner.tick(later(0))
    crawl.refresh_from_db()
    assert admin.client(crawl.redis_db).hlen(f"{crawl.pk}:dedup") == 20_000
    assert crawl.dedup_index_bytes > 2 * MiB
    report(admin, crawl, done=1, found=2, pages=["http://site/a"])
    runner.tick(later(20))
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (CrawlStatus.RUNNING, "")

    crawler, db = own_client(admin, crawl), crawl.redis_db
    fill(crawler, f"{crawl.pk}:anything", 4 * MiB)  # what its crawler writes still counts
    runner.tick(later(40))
    assert_cut_off(admin, crawl, crawler, db)
    crawler.close()


def test_a_crawl_is_handed_only_the_newest_payloads_up_to_the_limit(
        make_runner, make_crawl, fake, settings, store, org, caplog):
    kept_payloads(org, 300, name="a")
    newer = kept_payloads(org, 300, name="b")
    crawl = make_crawl(dedup=True)
    runner = make_runner(fake, settings=settings.model_copy(update={"dedup_max_payloads": 250}))
    runner.tick(later(0))
    crawl.refresh_from_db()
    handed = store.client(crawl.redis_db).hgetall(f"{crawl.pk}:dedup")
    assert len(handed) == 250
    assert {value.split(" ")[1] for value in handed.values()} == {str(newer.pk)}
    assert (f"crawl {crawl.short_id}: deduplicating against 250 payload(s) the org kept (the "
            "newest of 600: ARCHIVER_DEDUP_MAX_PAYLOADS)") in caplog.text


@pytest.mark.parametrize("estimated", [True, False], ids=["refused-before", "refused-by-redis"])
def test_an_index_the_redis_server_has_no_room_for_is_not_left_there_and_the_crawl_runs_without(
        make_runner, make_crawl, fake, settings, admin, org, caplog, monkeypatch, estimated):
    kept_payloads(org, 12_000, path="p" * 3000)  # 36 MB of URLs, over the server's 32 MiB
    if not estimated:  # the estimate wrong: the server's refusal is the last guard
        monkeypatch.setattr(launch, "no_room", lambda client, estimate: "")
    other = make_crawl()
    crawl = make_crawl(dedup=True)
    runner = make_runner(fake, settings=settings.model_copy(update={"max_concurrent_crawls": 2}),
                         store=admin)
    runner.tick(later(0))
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.RUNNING and crawl.dedup_index_bytes == 0
    why = ("; not handed: about 38.1 MB where the Redis server has" if estimated
           else "; Redis refused the index (")
    assert f"deduplicating against 0 payload(s) the org kept{why}" in caplog.text
    assert admin.client(crawl.redis_db).dbsize() <= 2  # nothing of the index left, room for all
    report(admin, other, done=1, found=2, pages=["http://site/a"])  # another crawl still writes
    runner.tick(later(20))
    assert Crawl.objects.get(pk=other.pk).pages_done == 1


def test_what_a_crawler_writes_into_database_0_is_dropped_by_the_watch(embedded, admin):
    """Every connection starts in database 0, which no crawl uses and no ACL rule can close:
    a crawler filling it escaped its database's budget. The watch of the embedded server
    empties it at every look; the crawls' own databases are left alone."""
    own = admin.grant(5, "c1")
    crawler = redis.Redis.from_url(own.url(0), socket_timeout=5)  # its login, before any SELECT
    fill(crawler, "junk", 4 * MiB)
    admin.client(5).set("c1:d", 3)
    watch = RedisWatch(embedded, admin.endpoint)
    watch.check(later(0))
    assert admin.client(0).dbsize() == 0
    assert admin.client(5).get("c1:d") == "3"
    crawler.close()


def test_the_watch_of_an_external_redis_leaves_database_0_alone(admin):
    admin.client(0).set("someone-elses", "data")  # an external server may serve other software
    RedisWatch(None, admin.endpoint).check(later(0))
    assert admin.client(0).get("someone-elses") == "data"

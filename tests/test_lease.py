"""The lease queue's rules, with time pinned: what is due, who wins a claim, what a lost lease may do.

Runs on whatever database the settings name: SQLite by default, and PostgreSQL when
test_claims_concurrency.py runs this file against a fresh PostgreSQL database.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from crawls.config import CrawlConfig
from crawls.lease import FAR_FUTURE, db_now
from crawls.models import Crawl, CrawlEvent, CrawlStatus, Org

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
LEASE = 30


def seconds(n: float) -> dt.timedelta:
    return dt.timedelta(seconds=n)


@pytest.fixture
def org() -> Org:
    return Org.objects.get(slug="default")


@pytest.fixture
def make_crawl(org):
    """A queued crawl, due at `retry_at` (default: NOW), created at `created_at`."""

    def make(retry_at=NOW, created_at=None, url="https://example.com/", in_org=None) -> Crawl:
        crawl = Crawl.create(in_org or org, CrawlConfig(seeds=[url]), now=created_at or NOW - seconds(60))
        Crawl.objects.filter(pk=crawl.pk).update(retry_at=retry_at)
        crawl.refresh_from_db()
        return crawl

    return make


def claim(owner="runner-a", now=NOW, limit=1, lease=LEASE):
    return Crawl.objects.claim(owner, now, lease, limit=limit)


def row(crawl: Crawl) -> Crawl:
    return Crawl.objects.get(pk=crawl.pk)


# --- due ----------------------------------------------------------------------------------


def test_a_crawl_is_due_when_its_retry_at_is_now_or_earlier(make_crawl):
    earlier, exactly, later = make_crawl(NOW - seconds(1)), make_crawl(NOW), make_crawl(NOW + seconds(1))

    due = set(Crawl.objects.due(NOW).values_list("pk", flat=True))

    assert due == {earlier.pk, exactly.pk}
    assert later.pk not in due


def test_a_crawl_without_retry_at_is_never_due(make_crawl):
    make_crawl(retry_at=None)

    assert not Crawl.objects.due(FAR_FUTURE).exists()


# --- claim --------------------------------------------------------------------------------


def test_a_claim_takes_the_oldest_due_crawl_first(make_crawl):
    newest = make_crawl(NOW - seconds(1), created_at=NOW - seconds(300))
    tie_younger = make_crawl(NOW - seconds(5), created_at=NOW - seconds(100))
    tie_older = make_crawl(NOW - seconds(5), created_at=NOW - seconds(200))

    order = [claim()[0].pk for _ in range(3)]

    assert order == [tie_older.pk, tie_younger.pk, newest.pk]


def test_a_claim_leases_the_crawl_and_bumps_its_fencing_token(make_crawl):
    crawl = make_crawl()

    [won] = claim("runner-a")

    leased = row(crawl)
    assert (won.pk, won.token) == (crawl.pk, crawl.lease_token + 1)
    assert leased.lease_owner == "runner-a"
    assert leased.lease_token == won.token
    assert leased.retry_at == NOW + seconds(LEASE)
    assert leased.lease_is_live(NOW)


def test_a_claim_returns_at_most_limit_crawls(make_crawl):
    for _ in range(5):
        make_crawl()

    assert [len(claim(limit=3)), len(claim(limit=3)), len(claim(limit=3))] == [3, 2, 0]


def test_a_leased_crawl_is_not_claimed_again_while_its_lease_lasts(make_crawl):
    make_crawl()
    claim("runner-a")

    assert claim("runner-b", now=NOW + seconds(LEASE - 1)) == []


def test_an_expired_lease_is_claimable_again_with_a_new_token(make_crawl):
    crawl = make_crawl()
    [first] = claim("runner-a")

    assert Crawl.objects.due(NOW + seconds(LEASE)).filter(pk=crawl.pk).exists()
    [second] = claim("runner-b", now=NOW + seconds(LEASE))

    assert second.pk == crawl.pk
    assert second.token == first.token + 1
    assert row(crawl).lease_owner == "runner-b"


def test_the_old_token_can_no_longer_renew_release_or_transition(make_crawl):
    crawl = make_crawl()
    [old] = claim("runner-a")
    assert crawl.mark_starting(old.token, NOW)
    later = NOW + seconds(LEASE + 1)
    [new] = claim("runner-b", now=later)
    before = row(crawl)
    events = CrawlEvent.objects.count()

    assert not Crawl.objects.renew(crawl.pk, old.token, later, LEASE)
    assert not Crawl.objects.release(crawl.pk, old.token, later)
    assert not crawl.mark_running(old.token, later)
    assert not crawl.finish(CrawlStatus.COMPLETE, old.token, later)

    after = row(crawl)
    assert (after.status, after.retry_at, after.lease_owner, after.lease_token) == (
        before.status, before.retry_at, "runner-b", new.token)
    assert after.finished_at is None
    assert CrawlEvent.objects.count() == events


def test_the_new_token_may_transition(make_crawl):
    crawl = make_crawl()
    claim("runner-a")
    [new] = claim("runner-b", now=NOW + seconds(LEASE))

    assert crawl.mark_starting(new.token, NOW + seconds(LEASE))
    assert row(crawl).status == CrawlStatus.STARTING


def test_a_paused_crawl_is_not_claimed_before_its_pause_limit(make_crawl):
    crawl = make_crawl()
    crawl.pause(NOW)
    pause_limit_at = row(crawl).retry_at

    assert pause_limit_at > NOW + seconds(3600)
    assert claim(now=pause_limit_at - seconds(1)) == []


def test_a_crawl_parked_in_the_far_future_is_never_claimed(make_crawl):
    make_crawl(retry_at=FAR_FUTURE)

    assert claim(now=NOW + dt.timedelta(days=365 * 100)) == []


def test_a_finished_crawl_is_never_claimed(make_crawl):
    crawl = make_crawl()
    [won] = claim()
    assert crawl.finish(CrawlStatus.CANCELED, won.token, NOW)

    assert row(crawl).retry_at is None
    assert claim(now=FAR_FUTURE) == []


def test_a_filtered_queryset_claims_only_its_own_crawls(make_crawl):
    other_org = Org.objects.create(slug="other")
    make_crawl(NOW - seconds(10))
    theirs = make_crawl(NOW, in_org=other_org)

    won = Crawl.objects.filter(org=other_org).claim("runner-a", NOW, LEASE, limit=5)

    assert [c.pk for c in won] == [theirs.pk]


def test_a_queryset_filtered_through_a_join_claims_only_its_own_crawls(make_crawl):
    other_org = Org.objects.create(slug="other")
    make_crawl(NOW - seconds(10))
    theirs = make_crawl(NOW, in_org=other_org)

    won = Crawl.objects.filter(org__slug="other").claim("runner-a", NOW, LEASE, limit=5)

    assert [c.pk for c in won] == [theirs.pk]


def test_a_claim_in_creation_order_takes_the_oldest_created_due_crawl(make_crawl):
    make_crawl(NOW - seconds(50), created_at=NOW - seconds(10))
    oldest = make_crawl(NOW - seconds(1), created_at=NOW - seconds(20))
    make_crawl(NOW + seconds(1), created_at=NOW - seconds(30))

    [won] = Crawl.objects.claim("runner-a", NOW, LEASE, order_by=("created_at",))

    assert won.pk == oldest.pk


# --- renew, release, leased_by -------------------------------------------------------------


def test_renew_extends_the_lease(make_crawl):
    crawl = make_crawl()
    [won] = claim("runner-a")

    assert Crawl.objects.renew(crawl.pk, won.token, NOW + seconds(20), LEASE)

    assert row(crawl).retry_at == NOW + seconds(20 + LEASE)
    assert claim("runner-b", now=NOW + seconds(LEASE + 5)) == []


def test_release_requeues_the_crawl_after_a_delay(make_crawl):
    crawl = make_crawl()
    [won] = claim("runner-a")

    assert Crawl.objects.release(crawl.pk, won.token, NOW + seconds(60))

    assert row(crawl).lease_owner == ""
    assert claim("runner-b", now=NOW + seconds(59)) == []
    [again] = claim("runner-b", now=NOW + seconds(60))
    assert (again.pk, again.token) == (crawl.pk, won.token + 1)


def test_leased_by_lists_what_an_owner_holds(make_crawl):
    mine = {make_crawl().pk, make_crawl().pk}
    make_crawl()
    claim("runner-a", limit=2)
    claim("runner-b")

    assert set(Crawl.objects.leased_by("runner-a").values_list("pk", flat=True)) == mine


# --- the database underneath ------------------------------------------------------------------


def explain(sql: str) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Tiny test tables would be scanned sequentially; the question is whether an
            # index can serve the claim at all.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}")
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
        return " ".join(str(part) for line in cursor.fetchall() for part in line)


def test_the_claim_scans_the_partial_due_index(make_crawl):
    make_crawl()
    with CaptureQueriesContext(connection) as queries:
        claim()

    assert "crawl_due " in explain(queries.captured_queries[-1]["sql"]) + " "


def test_a_claim_in_creation_order_scans_the_creation_index(make_crawl):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite picks this index only once ANALYZE has gathered statistics")
    # Many finished crawls (retry_at NULL), as a real table has: the claim must walk the
    # partial index of due rows, not every crawl in creation order (the API's list index).
    first = make_crawl()
    Crawl.objects.bulk_create([
        Crawl(org=first.org, seeds=first.seeds, config=first.config, status="complete", retry_at=None,
              created_at=NOW - dt.timedelta(days=1, seconds=i))
        for i in range(3000)
    ])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE crawls_crawl")
    with CaptureQueriesContext(connection) as queries:
        Crawl.objects.claim("runner-a", NOW, LEASE, order_by=("created_at",))

    assert "crawl_due_created " in explain(queries.captured_queries[-1]["sql"]) + " "


def test_the_tick_finds_redis_holders_through_the_redis_db_index(make_crawl):
    # Run every tick: it must not read the finished crawls, which grow without bound (the
    # default newest-first order once made SQLite walk the whole table: 66 ms at 100k rows).
    make_crawl()
    with CaptureQueriesContext(connection) as queries:
        list(Crawl.objects.holding_redis().values_list("redis_db", flat=True))
        list(Crawl.objects.final_holding_redis(NOW))

    for query in queries.captured_queries[:2]:
        assert "crawl_redis_db_once" in explain(query["sql"]), query["sql"]


def test_db_now_is_an_aware_utc_time_close_to_ours():
    now = db_now()

    assert now.utcoffset() == dt.timedelta(0)
    assert abs(now - timezone.now()) < seconds(5)

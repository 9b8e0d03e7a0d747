"""Resources a crawl uses are owned through its lease: its Redis database, its home (the
runner and data dir holding its instances and files), its instances."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from crawls.models import Crawl, CrawlStatus, ExitReason, ProcessStatus, RunnerRecord
from runner.daemon import RunnerBusy
from runner.launchers import hostname
from runner.steps import claim
from tests.runner.step_helpers import T0, end_instance, keys, later, report

S = CrawlStatus
pytestmark = pytest.mark.django_db


@pytest.fixture
def several_runners(monkeypatch):
    """Runners of several data dirs on this (SQLite) test database: what PostgreSQL
    deployments do; SQLite itself refuses it (tested below)."""
    monkeypatch.setattr("runner.daemon.refuse_shared_sqlite", lambda *args: None)


def test_a_redis_database_held_by_one_crawl_cannot_be_taken_by_another(make_crawl):
    first, second = make_crawl(), make_crawl()
    Crawl.objects.filter(pk__in=[first.pk, second.pk]).update(lease_token=7)
    first.refresh_from_db()
    second.refresh_from_db()

    assert first.take_redis_db(5, token=7)
    assert not second.take_redis_db(5, token=7)  # the unique index refuses the second holder
    assert second.take_redis_db(6, token=7)
    assert Crawl.objects.get(pk=second.pk).redis_db == 6


def test_allocation_skips_a_database_another_runner_won_since_we_looked(make_runner, make_crawl, fake,
                                                                       store, monkeypatch):
    other, crawl = make_crawl(), make_crawl()
    Crawl.objects.filter(pk=other.pk).update(redis_db=1, status=S.RUNNING)  # won meanwhile
    store.client(1).set("theirs", "kept")
    runner = make_runner(fake)
    # The list of used databases was read before the other runner won db 1.
    monkeypatch.setattr(Crawl.objects, "holding_redis", lambda: Crawl.objects.none())

    runner.tick(T0)

    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and crawl.redis_db == 2
    assert store.client(1).get("theirs") == "kept"  # never flushed by the loser


def test_a_finished_crawl_flushes_its_database_before_giving_it_back(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    crawl.refresh_from_db()
    db = crawl.redis_db
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(1))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE and crawl.redis_db is None
    assert store.client(db).dbsize() == 0


def test_a_database_left_held_by_a_crash_after_finishing_is_flushed_then_released(make_runner, make_crawl,
                                                                                  fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    crawl.refresh_from_db()
    db = crawl.redis_db
    runner.held.clear()  # the runner dies right after finishing, before its clean-up
    Crawl.objects.filter(pk=crawl.pk).update(status=S.COMPLETE, finished_at=T0, retry_at=None)
    store.client(db).set("left", "over")

    runner.tick(later(1))  # too soon: the finishing runner may still be releasing it
    assert Crawl.objects.get(pk=crawl.pk).redis_db == db
    runner.tick(later(60))
    assert Crawl.objects.get(pk=crawl.pk).redis_db is None and store.client(db).dbsize() == 0


def test_a_crawl_records_its_home_and_another_runner_leaves_it_while_its_runner_lives(
        make_runner, make_crawl, fake, settings, tmp_path, several_runners):
    crawl = make_crawl()
    home_runner = make_runner(fake)
    home_runner.tick(T0)
    crawl.refresh_from_db()
    assert crawl.home_runner == home_runner.id and crawl.home_dir.endswith(str(settings.data_dir))

    other_dir = tmp_path / "other"
    other = make_runner(fake, settings=settings.model_copy(update={"data_dir": other_dir}))
    RunnerRecord.objects.filter(pk=home_runner.id).update(heartbeat_at=later(20))
    other.tick(later(20))  # the lease (5 s) expired, but the home runner is alive
    assert crawl.pk not in other.held
    assert Crawl.objects.get(pk=crawl.pk).lease_owner == home_runner.id


def test_a_crawl_whose_runner_is_dead_is_adopted_and_relaunched_without_using_an_attempt(
        make_runner, make_crawl, fake, settings, store, tmp_path, several_runners):
    crawl = make_crawl()
    home_runner = make_runner(fake)
    home_runner.tick(T0)
    report(store, crawl, done=3, found=10)

    other = make_runner(fake, settings=settings.model_copy(update={"data_dir": tmp_path / "other"}))
    dead_for = claim.DEAD_AFTER_LEASES * settings.lease_seconds + 1
    other.tick(later(dead_for))

    crawl.refresh_from_db()
    assert crawl.pk in other.held and crawl.home_runner == other.id
    # Its old crawler may still run (only the daemon died): it is asked to stop first, and
    # nothing is launched beside it.
    host = hostname(crawl.pk, 0)
    assert keys(store, crawl).hget(f"{crawl.pk}:stopone", host) == "1"
    assert crawl.processes.count() == 1
    keys(store, crawl).hset(f"{crawl.pk}:status", host, "done")  # what a stopped one says
    other.tick(later(dead_for + 1))

    crawl.refresh_from_db()
    old, new = crawl.processes.order_by("pk")
    assert old.status == ProcessStatus.LOST and old.exit_reason == ExitReason.ORPHANED
    assert new.status == ProcessStatus.RUNNING and new.runner == other.id
    assert crawl.pages_done == 3  # continued from its Redis state
    assert keys(store, crawl).get(f"{crawl.pk}:d") == "3"
    # The old instance's fields are forgotten, so its "done" does not end the crawl.
    assert keys(store, crawl).hget(f"{crawl.pk}:status", host) is None
    assert keys(store, crawl).hget(f"{crawl.pk}:stopone", host) is None


def test_two_data_dirs_cannot_share_one_sqlite_database(make_runner, settings, fake, tmp_path):
    make_runner(fake)
    with pytest.raises(RunnerBusy, match="SQLite serves one runner"):
        make_runner(fake, settings=settings.model_copy(update={"data_dir": tmp_path / "second"}))


def test_an_instance_started_but_never_recorded_is_found_not_launched_twice(make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    process = crawl.processes.get()
    # kill -9 between the launch and the row update: the row looks as if never launched.
    process.__class__.objects.filter(pk=process.pk).update(
        status=ProcessStatus.STARTING, started_at=None, container_id="", retry_at=T0)

    runner.tick(later(1))

    assert fake.launches == 1 and len(fake.running(crawl.pk)) == 1
    process.refresh_from_db()
    assert process.status == ProcessStatus.RUNNING and process.container_id


def test_a_lease_is_not_renewed_with_a_stale_clock(make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    runner.tick(later(4))
    assert Crawl.objects.get(pk=crawl.pk).retry_at > later(4) + dt.timedelta(seconds=4)


def test_a_runner_that_comes_back_keeps_what_its_data_dir_holds_for_a_crawl_that_left_it(
        make_runner, make_crawl, fake, settings, store, tmp_path, several_runners):
    crawl = make_crawl()
    first = make_runner(fake)
    first.tick(T0)
    folder = settings.data_dir / "crawls" / crawl.pk / "0" / "collections" / crawl.pk
    (folder / "archive").mkdir(parents=True)
    (folder / "archive" / "rec-0.warc.gz").write_bytes(b"r" * 300)  # never packaged
    archives = settings.data_dir / "archives" / crawl.pk
    archives.mkdir(parents=True)
    (archives / f"{crawl.pk}-0-99.wacz").write_bytes(b"z" * 200)  # moved, then the crash
    # The first runner dies; another adopts the crawl and finishes it elsewhere.
    other = make_runner(fake, settings=settings.model_copy(update={"data_dir": tmp_path / "other"}))
    other.tick(later(claim.DEAD_AFTER_LEASES * settings.lease_seconds + 1))
    Crawl.objects.filter(pk=crawl.pk).update(status=S.COMPLETE, retry_at=None, lease_owner="")

    back = make_runner(fake)
    back.keep_what_is_left_here(later(100))

    kept = {row.path.rsplit("/", 1)[1]: (row.size, row.root) for row in crawl.files.all()}
    assert kept[f"{crawl.pk}-0-99.wacz"] == (200, str(settings.data_dir))
    assert any(name.endswith("rec-0.warc.gz") and size == 300 for name, (size, _) in kept.items())
    assert not (settings.data_dir / "crawls" / crawl.pk).exists()
    assert (archives / f"{crawl.pk}-0-99.wacz").read_bytes() == b"z" * 200


def test_a_restarting_runner_never_leaves_its_home_without_a_live_record(
        make_runner, make_crawl, fake, settings, tmp_path, several_runners):
    """Between stopping its dead predecessor's record and writing its own, a restarting
    runner's home once looked dead: a runner ticking then adopted its crawls while their
    crawlers still ran here (pages lost in the two-runner chaos trial, 1 run in ~30)."""
    from django.db import connection

    crawl = make_crawl()
    make_runner(fake).tick(T0)  # dies holding the crawl; its crawlers go on running
    other = make_runner(fake, settings=settings.model_copy(update={"data_dir": tmp_path / "other"}))
    home = f"{os.uname().nodename}:{settings.data_dir}"
    seen, checking = [], [False]

    def after_each_statement(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not checking[0]:
            checking[0] = True
            try:
                seen.append(home in claim.live_homes(other.rt, later(6)))
            finally:
                checking[0] = False
        return result

    with connection.execute_wrapper(after_each_statement):
        make_runner(fake, clock=lambda: later(6))  # restarted 6 s later: register()

    assert seen and all(seen), seen
    other.tick(later(6))
    assert crawl.pk not in other.held


def test_a_crawler_left_running_for_a_crawl_adopted_away_is_stopped_and_its_work_kept(
        make_runner, make_crawl, fake, settings, store, tmp_path, several_runners):
    """A runner gone longer than DEAD_AFTER_LEASES leases loses its crawls to another, but
    its crawlers may still run (only the daemon died). When it is back, each such crawler is
    removed and what it archived is recorded for the crawl, from this data dir."""
    from tests.runner.archive_helpers import collection, package, warc_bytes, write_session

    crawl = make_crawl()
    make_runner(fake).tick(T0)
    other = make_runner(fake, settings=settings.model_copy(update={"data_dir": tmp_path / "other"}))
    dead_for = claim.DEAD_AFTER_LEASES * settings.lease_seconds + 1
    other.tick(later(dead_for))
    old, new = crawl.processes.order_by("pk")
    assert old.exit_reason == ExitReason.ORPHANED and new.runner == other.id
    # Meanwhile the orphan went on: one session packaged, one more WARC not yet.
    coll = collection(settings.data_dir, crawl.pk)
    write_session(coll, {"rec-0.warc.gz": warc_bytes("http://site.test/a")}, ["http://site.test/a"])
    package(coll, crawl.pk)
    (coll / "archive" / "rec-1.warc.gz").write_bytes(warc_bytes("http://site.test/b"))

    back = make_runner(fake, clock=lambda: later(dead_for + 1))
    back.tick(later(dead_for + 1))

    assert fake.running(crawl.pk) == [fake.ref_of(new)]  # the orphan is gone
    kept = {row.path.rsplit("/", 1)[1]: row.root for row in crawl.files.all()}
    assert kept[f"{crawl.pk}-0-{old.pk}.wacz"] == str(settings.data_dir)
    assert any(name.endswith("rec-1.warc.gz") for name in kept)
    assert Crawl.objects.get(pk=crawl.pk).lease_owner == other.id  # still the adopter's


@pytest.mark.parametrize("thread", [0, 3])  # any of the daemon's delivery threads
def test_a_webhook_delivery_a_dead_runner_was_sending_is_due_again_at_once(make_runner, make_crawl, thread):
    """Seen in bench/chaos.py: a runner killed -9 between claiming a delivery and sending it
    left the event undelivered for the delivery lease (2 minutes), not the crawl lease."""
    from crawls.models import Webhook, WebhookDelivery
    from runner import webhooks

    crawl = make_crawl()
    first = make_runner()
    event = crawl.events.create(name="crawl.completed", payload={})
    hook = Webhook.objects.create(url="https://hooks.example/x", secret="s" * 20)
    delivery = WebhookDelivery.objects.create(webhook=hook, event=event, retry_at=T0)
    [claimed] = WebhookDelivery.objects.open().claim(webhooks.lease_owner(first.id, thread), T0, 120)
    assert claimed.pk == delivery.pk
    # killed -9 here; the next runner of this data dir starts
    make_runner()
    delivery.refresh_from_db()
    assert delivery.retry_at <= T0
    assert [c.pk for c in WebhookDelivery.objects.open().claim("someone", T0, 120)] == [delivery.pk]

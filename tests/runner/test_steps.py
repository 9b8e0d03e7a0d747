"""The runner's steps, one at a time, with the in-memory launcher and the in-memory store
(tests/fakes.py: no Redis server, no processes).

Time is pinned: each test passes `now` to tick(); the crawler's side of the protocol is
played by writing its keys into Redis and ending fake instances.
"""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlLog,
    CrawlStatus,
    ExitReason,
    Intent,
    Org,
    ProcessStatus,
    Snapshot,
)
from runner.daemon import RunnerBusy, acquire_runner_lock
from runner.launchers import hostname
from tests.runner.step_helpers import T0, end_instance, keys, later, report

S = CrawlStatus
pytestmark = pytest.mark.django_db


@pytest.fixture
def store(memory_store):
    return memory_store


# --- claiming --------------------------------------------------------------------------


def test_a_queued_crawl_is_claimed_launched_and_running_after_one_tick(make_runner, make_crawl, fake):
    crawl = make_crawl(workers=2)
    runner = make_runner(fake)

    runner.tick(T0)

    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and crawl.started_at == T0
    assert crawl.redis_db == 1 and crawl.lease_owner == runner.id
    (process,) = crawl.processes.all()
    assert process.status == ProcessStatus.RUNNING and process.hostname == f"crawl-{crawl.pk}-0"
    args = process.args
    assert args[args.index("--workers") + 1] == "2"
    assert args[args.index("--crawlId") + 1] == crawl.pk == args[args.index("--collection") + 1]
    assert {"--generateWACZ", "--writePagesToRedis", "--logErrorsToRedis", "--restartsOnError"} <= set(args)
    assert args[args.index("--text") + 1] == "to-pages"  # the page text, for search


def test_claiming_respects_the_hosts_capacity_oldest_first(make_runner, make_crawl, fake):
    crawls = [make_crawl(now=T0 - dt.timedelta(minutes=3 - i)) for i in range(3)]
    runner = make_runner(fake)

    runner.tick(T0)

    states = [Crawl.objects.get(pk=c.pk) for c in crawls]
    assert [c.status for c in states] == [S.RUNNING, S.RUNNING, S.WAITING_CAPACITY]
    assert states[2].waiting_reason == "waiting: the host runs 2 of 2 crawls"
    assert states[2].lease_owner == ""


def test_a_crawl_waits_for_its_orgs_limit_and_starts_when_a_slot_frees(make_runner, make_crawl, fake, store):
    news = Org.objects.create(slug="news", max_concurrent_crawls=1)
    first = make_crawl(org=news, now=T0 - dt.timedelta(minutes=2))
    second = make_crawl(org=news, now=T0 - dt.timedelta(minutes=1))
    runner = make_runner(fake)

    runner.tick(T0)
    second.refresh_from_db()
    assert second.status == S.WAITING_ORG_LIMIT
    assert second.waiting_reason == "waiting: org 'news' already runs 1 of 1 crawls"

    end_instance(fake, store, first, 0, "done")
    runner.tick(later(1))
    runner.tick(later(10))
    assert Crawl.objects.get(pk=first.pk).status == S.COMPLETE
    assert Crawl.objects.get(pk=second.pk).status == S.RUNNING


def test_a_crawl_whose_org_storage_is_full_is_skipped(make_runner, make_crawl, fake):
    full = Org.objects.create(slug="full", storage_quota_bytes=1000, bytes_stored=1000)
    crawl = make_crawl(org=full)

    make_runner(fake).tick(T0)

    crawl.refresh_from_db()
    assert crawl.status == S.SKIPPED_QUOTA_REACHED and crawl.retry_at is None
    assert "storage quota reached" in crawl.error
    assert fake.launches == 0


def test_a_lost_lease_means_hands_off(make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    # Another runner took it over: its claim bumped the token.
    Crawl.objects.filter(pk=crawl.pk).update(lease_token=crawl.lease_token + 5, lease_owner="other")

    runner.tick(later(1))

    assert crawl.pk not in runner.held
    crawl.refresh_from_db()
    assert crawl.lease_owner == "other" and crawl.status == S.RUNNING


def test_a_second_runner_on_the_same_data_dir_is_refused_naming_the_first(settings):
    first = acquire_runner_lock(settings)
    try:
        with pytest.raises(RunnerBusy, match=r"another runner \(pid \d+\) already runs"):
            acquire_runner_lock(settings)
    finally:
        first.close()
    acquire_runner_lock(settings).close()  # free again once the first is gone


def test_a_restarted_runner_adopts_the_crawls_of_the_dead_one_at_once(make_runner, make_crawl, fake):
    crawl = make_crawl()
    dead = make_runner(fake)
    dead.tick(T0)

    successor = make_runner(fake)  # register() sees the dead runner of this data dir
    successor.tick(later(1))

    crawl.refresh_from_db()
    assert crawl.lease_owner == successor.id and crawl.status == S.RUNNING
    assert crawl.processes.count() == 1  # the running instance was adopted, not relaunched


# --- supervising -----------------------------------------------------------------------


def test_progress_pages_and_errors_are_recorded_once(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=2, found=5, size=1234, pages=["http://site/0", "http://site/1"])
    keys(store, crawl).rpush(f"{crawl.pk}:e", '{"logLevel": "error", "context": "fetch", "message": "boom"}')

    runner.tick(later(1))
    report(store, crawl, done=2, found=5, size=1234, pages=["http://site/1"])  # reported twice
    runner.tick(later(2))

    crawl.refresh_from_db()
    assert (crawl.pages_done, crawl.pages_found, crawl.size_bytes) == (2, 5, 1234)
    assert sorted(Snapshot.objects.filter(crawl=crawl).values_list("url", flat=True)) == [
        "http://site/0", "http://site/1"]
    assert CrawlLog.objects.filter(crawl=crawl, message="boom", source="fetch").count() == 1


def test_a_finished_crawl_keeps_its_wacz_and_frees_its_redis_db(make_runner, make_crawl, fake, store, settings):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=3, found=3)
    db = Crawl.objects.get(pk=crawl.pk).redis_db

    end_instance(fake, store, crawl, 0, "done", wacz=b"PK-archive")
    runner.tick(later(2))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE and crawl.redis_db is None and crawl.retry_at is None
    (record,) = CrawlFile.objects.filter(crawl=crawl)
    assert (settings.data_dir / record.path).read_bytes() == b"PK-archive"
    assert record.size == 10 and len(record.sha256) == 64
    assert Org.objects.get(pk=crawl.org_id).bytes_stored == 10
    assert store.client(db).dbsize() == 0
    assert fake.instances == {}
    assert not (settings.crawls_dir / crawl.pk).exists()


def test_a_crash_is_relaunched_with_backoff_until_the_attempts_run_out(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)

    end_instance(fake, store, crawl, 1, None, wacz=b"first session")
    runner.tick(later(1))
    pending = crawl.processes.get(status=ProcessStatus.STARTING)
    assert pending.retry_at == later(2) and pending.started_at is None  # 1 s backoff
    assert CrawlFile.objects.filter(crawl=crawl).count() == 1  # kept before the relaunch

    runner.tick(later(2.5))
    assert len(fake.running(crawl.pk)) == 1
    end_instance(fake, store, crawl, 1, None)
    runner.tick(later(3))
    assert crawl.processes.get(status=ProcessStatus.STARTING).retry_at == later(5)  # 2 s
    runner.tick(later(5))
    end_instance(fake, store, crawl, 137, None)
    runner.tick(later(6))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    assert crawl.error == "the crawler crashed (failed 3 times, gave up; see the crawl's log)"
    reasons = list(crawl.processes.values_list("exit_reason", flat=True))
    assert reasons == [ExitReason.CRASH, ExitReason.CRASH, ExitReason.CRASH]  # 137, no OOM flag


def test_a_relaunched_instance_completes_the_crawl(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    end_instance(fake, store, crawl, 11, "interrupted")  # a signal: relaunch at once
    runner.tick(later(1))
    assert len(fake.running(crawl.pk)) == 1
    report(store, crawl, done=4, found=4)
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(2))
    assert Crawl.objects.get(pk=crawl.pk).status == S.COMPLETE


@pytest.mark.parametrize("code", [4, 17])
def test_a_permanent_exit_fails_the_crawl_at_once_with_the_reason(make_runner, make_crawl, fake, store, code):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)

    end_instance(fake, store, crawl, code, "failed")
    runner.tick(later(1))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    cause = {4: "configuration refused", 17: "fatal error"}[code]
    assert crawl.error == f"last words of the crawler ({cause}, exit {code})"  # the cause first
    assert f"(exit {code}): last words of the crawler" in crawl.error_detail
    assert crawl.summary()["error"] == crawl.error
    assert fake.launches == 1


def test_pause_interrupts_keeps_redis_and_resume_relaunches(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=1, found=3)
    crawl.pause(later(1))
    runner.tick(later(1))
    r = keys(store, crawl)
    assert r.get(f"{crawl.pk}:paused") == "1"

    end_instance(fake, store, crawl, 0, "interrupted", wacz=b"part one")
    runner.tick(later(2))
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and crawl.redis_db is not None
    assert r.get(f"{crawl.pk}:d") == "1"  # state kept for the resume
    assert fake.instances == {}

    crawl.resume(later(3))
    runner.tick(later(3))
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and r.get(f"{crawl.pk}:paused") is None
    assert len(fake.running(crawl.pk)) == 1
    end_instance(fake, store, crawl, 0, "done", wacz=b"part two")
    runner.tick(later(4))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE and crawl.files.count() == 2


def test_stop_sets_stopping_and_ends_stopped_by_user(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=2, found=9)
    crawl.stop(later(1))
    runner.tick(later(1))
    assert keys(store, crawl).get(f"{crawl.pk}:stopping") == "1"
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(2))
    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (S.STOPPED_BY_USER, "user")


def test_cancel_ends_canceled_and_deletes_the_partial_files(make_runner, make_crawl, fake, store, settings):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    end_instance(fake, store, crawl, 1, None, wacz=b"partial")  # a first session's file
    runner.tick(later(1))
    runner.tick(later(3))
    crawl.cancel(later(3))
    runner.tick(later(3))
    assert keys(store, crawl).get(f"{crawl.pk}:canceled") == "1"
    end_instance(fake, store, crawl, 0, "canceled")
    runner.tick(later(4))
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED and crawl.files.count() == 0
    assert not list((settings.data_dir / "archives").rglob("*.wacz"))
    assert Org.objects.get(pk=crawl.org_id).bytes_stored == 0


def test_a_page_limit_stops_the_crawl_gracefully(make_runner, make_crawl, fake, store):
    crawl = make_crawl(page_limit=3)
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=3, found=7)
    runner.tick(later(1))
    assert keys(store, crawl).get(f"{crawl.pk}:stopping") == "1"
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(2))
    assert Crawl.objects.get(pk=crawl.pk).status == S.STOPPED_PAGE_LIMIT


def test_execution_time_is_counted_per_instance_and_for_the_org(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    runner.tick(later(20))
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(30))
    crawl.refresh_from_db()
    assert crawl.exec_seconds == pytest.approx(30)
    assert crawl.org.exec_seconds_in_month(T0) == pytest.approx(30)


def test_an_unreachable_engine_makes_crawls_wait_then_proceed(make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    fake.unavailable = True
    runner.tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.WAITING_CAPACITY
    assert crawl.waiting_reason == "waiting: Docker engine unreachable"

    fake.unavailable = False
    runner.tick(later(3))
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and crawl.waiting_reason == ""
    assert crawl.processes.count() == 1


def test_unreachable_redis_is_a_visible_wait_and_later_a_clear_failure(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    runner.redis_grace = 60
    store.down = True

    runner.tick(later(1))
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING and crawl.waiting_reason == "waiting: Redis unreachable"
    runner.tick(later(62))
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and "Redis was unreachable for 60 s" in crawl.error


def test_a_failing_crawl_does_not_stop_the_others(make_runner, make_crawl, fake, store):
    good, bad = make_crawl(), make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    Crawl.objects.filter(pk=bad.pk).update(config={"not": "a config"})  # launch_config() raises

    end_instance(fake, store, bad, 1, None)
    runner.tick(later(2))
    end_instance(fake, store, good, 0, "done", wacz=b"x")
    runner.tick(later(3))
    assert Crawl.objects.get(pk=good.pk).status == S.COMPLETE
    assert Crawl.objects.get(pk=bad.pk).waiting_reason.startswith("runner error:")


def test_orphan_instances_of_final_crawls_are_removed(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    Crawl.objects.filter(pk=crawl.pk).update(status=S.CANCELED, retry_at=None, lease_owner="")

    assert runner.recover(later(1)) is True
    assert fake.instances == {}


def test_an_instance_that_vanished_is_marked_lost_and_relaunched(make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    fake.instances.clear()  # its container is gone without an exit status

    runner.tick(later(1))
    lost = crawl.processes.get(status=ProcessStatus.LOST)
    assert lost.exit_code is None
    runner.tick(later(2))
    assert len(fake.running(crawl.pk)) == 1


def test_intent_is_sent_once_per_lease(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    crawl.stop(later(1))
    runner.tick(later(1))
    keys(store, crawl).delete(f"{crawl.pk}:stopping")
    runner.tick(later(2))
    assert keys(store, crawl).get(f"{crawl.pk}:stopping") is None
    assert Crawl.objects.get(pk=crawl.pk).intent == Intent.STOP


def test_scaling_down_stops_one_instance_and_the_crawl_no_longer_waits_for_it(make_runner, make_crawl, fake, store):
    crawl = make_crawl(scale=2)
    runner = make_runner(fake)
    runner.tick(T0)
    assert len(fake.running(crawl.pk)) == 2
    report(store, crawl, instance=1, status="running")
    crawl.set_scale(1, later(1))
    runner.tick(later(1))
    r = keys(store, crawl)
    assert r.hget(f"{crawl.pk}:stopone", hostname(crawl.pk, 1)) == "1"

    end_instance(fake, store, crawl, 0, "done", instance=1, wacz=b"one")
    runner.tick(later(2))
    assert r.hget(f"{crawl.pk}:status", hostname(crawl.pk, 1)) is None
    end_instance(fake, store, crawl, 0, "done", instance=0, wacz=b"zero")
    runner.tick(later(3))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE and crawl.files.count() == 2


def test_a_new_crawl_waits_while_redis_is_down_instead_of_failing(make_runner, make_crawl, fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    store.down = True

    runner.tick(T0)

    crawl.refresh_from_db()
    assert crawl.status == S.WAITING_CAPACITY and crawl.waiting_reason == "waiting: Redis unreachable"
    assert crawl.lease_owner == "" and fake.launches == 0


def test_a_relative_data_dir_is_made_absolute_before_anything_is_launched(store, fake, monkeypatch, data_dir):
    from pathlib import Path

    from archiver.conf import Settings
    from runner.daemon import Runner

    monkeypatch.chdir(data_dir)
    runner = Runner(Settings(data_dir=Path("data")), fake, store)
    assert runner.settings.data_dir == data_dir / "data"

"""Faults are classified, bounded and said once; nothing is deleted because something went wrong."""

from __future__ import annotations

import pytest

from crawls.models import Crawl, CrawlFile, CrawlLog, CrawlStatus, ExitReason, Intent, ProcessStatus
from runner import observe
from tests.runner.step_helpers import T0, end_instance, keys, later, report

S = CrawlStatus
pytestmark = pytest.mark.django_db


def instance_dir(settings, crawl, instance=0):
    return settings.data_dir / "crawls" / crawl.pk / str(instance)


def test_out_of_disk_space_pauses_the_crawl_for_the_disk_instead_of_failing_it(make_runner, make_crawl,
                                                                              fake, store):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    end_instance(fake, store, crawl, 3, None)  # the crawler ran out of space while packaging
    runner.tick(later(1))
    keys(store, crawl).hset(f"{crawl.pk}:status", f"crawl-{crawl.pk}-0", "interrupted")
    runner.tick(later(2))

    crawl.refresh_from_db()
    assert crawl.intent == Intent.PAUSE or crawl.status == S.PAUSED
    assert crawl.waiting_reason.startswith("paused: disk")
    assert crawl.processes.filter(exit_reason=ExitReason.DISK).count() == 1
    assert crawl.status != S.FAILED


def test_redis_exits_do_not_use_up_launch_attempts(make_runner, make_crawl, fake, store, settings):
    crawl = make_crawl()
    runner = make_runner(fake)  # max_launch_attempts=3
    runner.tick(T0)
    t = 0.0
    for _ in range(4):
        end_instance(fake, store, crawl, 8, None)  # Redis restarted under the crawler
        t += 1
        runner.tick(later(t))
        t += 2.5
        runner.tick(later(t))
        assert len(fake.running(crawl.pk)) == 1
    end_instance(fake, store, crawl, 0, "done", wacz=b"x")
    runner.tick(later(t + 1))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE
    assert crawl.processes.filter(exit_reason=ExitReason.REDIS).count() == 4


def test_a_failed_crawl_keeps_the_warcs_its_crawler_left_unpackaged(make_runner, make_crawl, fake, store,
                                                                   settings):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    archive = instance_dir(settings, crawl) / "collections" / crawl.pk / "archive"
    archive.mkdir(parents=True)
    (archive / "rec-1.warc.gz").write_bytes(b"w" * 1000)
    end_instance(fake, store, crawl, 17, None)  # fatal: the crawl fails at once

    runner.tick(later(1))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    (kept,) = CrawlFile.objects.filter(crawl=crawl)
    assert kept.size == 1000 and (settings.data_dir / kept.path).read_bytes() == b"w" * 1000
    assert crawl.size_bytes == 1000 and crawl.org.bytes_stored == 1000


def test_an_unexpected_error_backs_off_and_fails_the_crawl_after_a_few(make_runner, make_crawl, fake,
                                                                       monkeypatch):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr("runner.steps.supervise.observe", broken)
    for second in range(1, 120):
        runner.tick(later(second))
        if Crawl.objects.get(pk=crawl.pk).is_final:
            break
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and "RuntimeError: boom" in crawl.error
    assert len(calls) == 5  # backed off in between: 2, 4, 8, 16 s
    assert second >= 30


def test_a_time_limit_holds_within_one_tick_not_the_counting_interval(make_runner, make_crawl, fake, store):
    crawl = make_crawl(time_limit=8)
    runner = make_runner(fake)  # execution time is counted every 15 s
    runner.tick(T0)
    report(store, crawl, done=1, found=5)
    runner.tick(later(9))

    crawl.refresh_from_db()
    assert crawl.stop_reason == "time_limit" and crawl.intent == Intent.STOP
    assert keys(store, crawl).get(f"{crawl.pk}:stopping") == "1"


def test_the_crawler_gets_what_is_left_of_the_size_and_time_limits(make_runner, make_crawl, fake, settings):
    make_crawl(size_limit=10_000, time_limit=600)
    runner = make_runner(fake)
    runner.tick(T0)

    (launched,) = fake.instances.values()
    assert launched.spec.config["sizeLimit"] == 10_000 and launched.spec.config["timeLimit"] == 600


def test_corrupt_progress_is_a_readable_wait_then_a_bounded_failure(make_runner, make_crawl, fake, store,
                                                                     monkeypatch):
    from archiver.errors import ProgressCorrupt

    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    runner.corrupt_grace = 30

    def corrupt(*args, **kwargs):
        raise ProgressCorrupt(f"{crawl.pk}:d", "holds 'abc', not a page count")

    monkeypatch.setattr(runner.store, "read", corrupt)
    for second in range(1, 40):
        runner.tick(later(second))
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and "holds 'abc', not a page count" in crawl.error
    said = CrawlLog.objects.filter(crawl=crawl, message__contains="cannot read its progress")
    assert said.count() == 1  # said once, not every tick


def test_the_observation_of_a_crawl_writes_nothing(make_runner, make_crawl, fake, store,
                                                   django_assert_num_queries):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    crawl = Crawl.objects.select_related("org").get(pk=crawl.pk)
    held = runner.held[crawl.pk]
    held.files_bytes = 0
    processes = list(crawl.processes.filter(status=ProcessStatus.RUNNING))
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        obs = observe.observe(runner.rt, crawl, held, later(1), processes, [])
    assert obs.progress is not None and obs.fault is None
    assert not [q for q in queries.captured_queries
                if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))]


def test_page_records_read_by_a_tick_that_died_before_storing_them_are_stored_by_the_next(
        make_runner, make_crawl, fake, store, monkeypatch):
    # As when the runner is killed -9 between reading Redis and writing the rows (the host
    # then dying too, no archive names those pages: they were lost, pages_missing in the
    # adoption trial under load).
    from runner import ingest

    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(T0)
    report(store, crawl, done=2, found=2, pages=["http://site/0", "http://site/1"])
    stored = ingest.ingest

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # nothing of the tick after the read happens

    monkeypatch.setattr(ingest, "ingest", killed)
    with pytest.raises(KeyboardInterrupt):
        runner.tick(later(1))
    monkeypatch.setattr(ingest, "ingest", stored)
    runner.tick(later(2))

    assert sorted(crawl.snapshots.values_list("url", flat=True)) == ["http://site/0", "http://site/1"]
    assert keys(store, crawl).llen(f"{crawl.pk}:pages") == 0

"""The crawl lifecycle end to end: the runner, archiver's crawler as local processes, the
private Redis and small sites on 127.0.0.1, on the real clock."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, Org, SnapshotStatus
from tests.ports import refused_port
from tests.runner.helpers import (
    assert_disjoint_archives,
    is_final,
    slow_site,
    status_of,
    wacz_responses,
)
from tests.waiting import drive, wait_for_pages

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.slow]



def test_an_org_limit_of_one_runs_three_crawls_one_after_another_oldest_first(make_runner, make_crawl):
    news = Org.objects.create(slug="news", max_concurrent_crawls=1)
    base = db_now()
    with slow_site(pages=3, delay=0.05) as site:
        # Created out of order: the age decides, not the insertion.
        middle, youngest, oldest = (make_crawl(site.url, org=news, now=base - dt.timedelta(seconds=s))
                                    for s in (2, 1, 3))
        runner = make_runner(clock=db_now)
        drive(runner, lambda: all(is_final(c)() for c in (oldest, middle, youngest)))

    crawls = [Crawl.objects.get(pk=c.pk) for c in (oldest, middle, youngest)]
    assert [c.status for c in crawls] == [S.COMPLETE] * 3
    for earlier, later in zip(crawls, crawls[1:], strict=False):
        assert earlier.finished_at <= later.started_at  # never two at once
    assert all(c.pages_done == 4 for c in crawls)


def test_a_crawl_of_an_org_whose_storage_is_full_is_skipped_and_never_launched(make_runner, make_crawl, settings):
    full = Org.objects.create(slug="full", storage_quota_bytes=10_000, bytes_stored=10_000)
    crawl = make_crawl("http://127.0.0.1:9/", org=full)
    runner = make_runner(clock=db_now)
    drive(runner, is_final(crawl), timeout=10)

    crawl.refresh_from_db()
    assert crawl.status == S.SKIPPED_QUOTA_REACHED and crawl.stop_reason == "storage_quota"
    assert crawl.error == "org 'full' storage quota reached: 10.0 KB of 10.0 KB used"
    assert crawl.processes.count() == 0 and crawl.started_at is None and crawl.redis_db is None
    assert not (settings.crawls_dir / crawl.pk).exists()


def test_the_time_limit_counts_running_time_not_the_time_paused(make_runner, make_crawl):
    # The runner's clock is the database's, moved an hour on while the crawl is paused: were
    # the pause counted, the resumed crawl would be over its limit at once. The crawler gets
    # what is left of the limit at each launch, so the limit leaves it seconds after the pause.
    skipped = dt.timedelta(0)
    with slow_site(pages=200, delay=0.1) as site:
        crawl = make_crawl(site.url, time_limit=12)
        runner = make_runner(clock=lambda: db_now() + skipped)
        runner.count_every = 0.5
        wait_for_pages(runner, crawl, 2)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        paused = Crawl.objects.get(pk=crawl.pk)
        assert 0 < paused.elapsed_seconds < 12
        skipped = dt.timedelta(hours=1)  # no tick while paused: as if it had waited that long
        call_command("resume", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.STOPPED_TIME_LIMIT and crawl.stop_reason == "time_limit"
    assert crawl.pages_done > paused.pages_done + 3  # it went on crawling after the resume
    # Reached: the limit and a tick's and the crawler's shutdown overshoot; far from the hour.
    assert 12 <= crawl.elapsed_seconds < 600
    assert crawl.finished_at - crawl.started_at > dt.timedelta(hours=1)


@contextlib.contextmanager
def late_page(port: int):
    """An HTTP server on `port` that answers every path with a small page."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            body = b"<html><head><title>Late</title></head><body>here now</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_failed_pages_are_retried_into_the_same_crawls_archive(make_runner, make_crawl, settings):
    nothing_listens = contextlib.ExitStack()
    late_port = nothing_listens.enter_context(refused_port())
    late = f"http://127.0.0.1:{late_port}/late.html"
    with nothing_listens, slow_site(pages=4, delay=0.01) as site:
        crawl = make_crawl(site.url, late)
        runner = make_runner(clock=db_now)
        drive(runner, is_final(crawl))
        crawl.refresh_from_db()
        assert crawl.status == S.COMPLETE and crawl.pages_failed == 1
        assert list(crawl.failed_pages().values_list("url", flat=True)) == [late]
        first_done, requests = crawl.pages_done, sum(site.requests.values())

        nothing_listens.close()
        with late_page(late_port):
            call_command("retry", crawl.pk, "--failed-pages", stdout=io.StringIO())
            drive(runner, is_final(crawl))
        assert sum(site.requests.values()) == requests  # the session crawled the failed page only

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.pages_failed == 0 and crawl.pages_done == first_done + 1
    assert crawl.snapshots.get(url=late).status == SnapshotStatus.DONE
    first, second = (settings.data_dir / f.path for f in crawl.files.order_by("created_at"))
    assert wacz_responses(second) == [late]
    assert_disjoint_archives([first, second], {late, site.url})
    assert crawl.size_bytes == sum(crawl.files.values_list("size", flat=True))


class Disk:
    def __init__(self):
        self.reason = None

    def __call__(self):
        return self.reason


def test_a_full_disk_pauses_the_running_crawl_and_it_resumes_when_space_returns(
        make_runner, make_crawl, settings):
    disk = Disk()
    with slow_site(pages=20, delay=0.1) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now, disk_check=disk)
        wait_for_pages(runner, crawl, 3)
        disk.reason = "waiting: disk 95 % full (limit 90 %)"
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        paused = Crawl.objects.get(pk=crawl.pk)
        assert paused.waiting_reason == "paused: disk 95 % full (limit 90 %)"
        for _ in range(5):
            runner.tick()
        assert status_of(crawl) == S.PAUSED
        disk.reason = None
        drive(runner, is_final(crawl))
        fetched_twice = [p for p, n in site.requests.items() if n > 1]

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE and crawl.pages_done == 21
    assert fetched_twice == []
    paths = [settings.data_dir / f.path for f in crawl.files.order_by("created_at")]
    assert len(paths) == 2
    assert_disjoint_archives(paths, {site.url})
    assert crawl.size_bytes == sum(crawl.files.values_list("size", flat=True))


def test_an_exclusion_added_while_the_crawl_runs_drops_the_queued_pages_it_matches(make_runner, make_crawl):
    with slow_site(pages=30, delay=0.1) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 4)  # p21..p30 are queued once p2 is done
        call_command("exclude", crawl.pk, r"/gen/p(2[1-9]|30)\.html", stdout=io.StringIO())
        drive(runner, is_final(crawl))
        fetched = set(site.requests)

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert not {f"/gen/p{i}.html" for i in range(21, 31)} & fetched
    assert crawl.pages_done == 21 and crawl.messages.get().sent_at is not None

"""How a crawl ends, judged on what is recorded: real crawler processes, the private Redis,
a site on 127.0.0.1."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, ExitReason, Snapshot, SnapshotStatus
from runner.launchers import LocalLauncher, hostname
from tests.runner.helpers import is_final, script
from tests.sitegen import serve_site
from tests.waiting import drive

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.mark.parametrize(("options", "state"), [
    ({"page_limit": 1}, S.STOPPED_PAGE_LIMIT), ({"scope_type": "page"}, S.COMPLETE)])
def test_a_one_page_crawl_ends_as_it_went_with_its_archive(make_runner, make_crawl, options, state):
    with serve_site() as site:
        crawl = make_crawl(site.url, **options)
        drive(make_runner(clock=db_now), is_final(crawl))

    crawl.refresh_from_db()
    assert (crawl.status, crawl.error) == (state, "")
    assert (crawl.pages_found, crawl.pages_done) == (1, 1)
    assert crawl.files.count() == 1
    assert list(crawl.processes.values_list("exit_reason", flat=True)) == [ExitReason.DONE]


def depths(crawl) -> dict[str, int]:
    return dict(Snapshot.objects.filter(crawl=crawl).values_list("url", "depth"))


def test_retrying_a_page_that_fails_again_leaves_the_crawl_complete_with_that_page_failed(
        make_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(site.url, depth=1, scope_type="any")
        runner = make_runner(clock=db_now)
        drive(runner, is_final(crawl))
        crawl.refresh_from_db()
        assert crawl.status == S.COMPLETE and crawl.pages_failed >= 1, crawl.error
        before = (crawl.pages_done, crawl.pages_failed, crawl.files.count(), depths(crawl))

        crawl.retry_failed_pages(db_now())
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert (crawl.status, crawl.error) == (S.COMPLETE, "")
    failed = crawl.snapshots.filter(status=SnapshotStatus.FAILED).count()
    done = crawl.snapshots.filter(status=SnapshotStatus.DONE).count()
    assert (crawl.pages_done, crawl.pages_failed) == (done, failed) == before[:2]
    assert crawl.files.count() >= before[2]
    assert depths(crawl) == before[3]


def silent_crawler(tmp_path) -> list[str]:
    """A crawler that exits 0 at once and reports nothing in Redis."""
    return script(tmp_path / "silent-crawler", "exit 0\n")


def test_a_crawler_that_exits_0_without_reporting_fails_after_its_attempts(
        make_runner, make_crawl, settings, tmp_path):
    crawl = make_crawl("http://127.0.0.1:9/")
    runner = make_runner(LocalLauncher(settings, command=silent_crawler(tmp_path)), clock=db_now)
    drive(runner, is_final(crawl), timeout=60)

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    assert crawl.error == ("the crawler exited without reporting how it ended "
                           "(failed 3 times, gave up; see the crawl's log)")
    assert crawl.error_detail == f"crawler instance {hostname(crawl.pk, 0)} failed 3 times"
    assert list(crawl.processes.values_list("exit_reason", flat=True)) == [ExitReason.UNREPORTED] * 3
    assert crawl.logs.filter(message__contains="exited with code 0 without reporting").count() == 3


@pytest.mark.parametrize("command", ["cancel", "stop"])
def test_a_crawl_being_stopped_or_canceled_gets_no_new_instance(
        make_runner, make_crawl, settings, tmp_path, command):
    settings = settings.model_copy(update={"max_launch_attempts": 50})
    crawl = make_crawl("http://127.0.0.1:9/")
    runner = make_runner(LocalLauncher(settings, command=silent_crawler(tmp_path)), settings=settings,
                         clock=db_now)
    drive(runner, lambda: crawl.processes.filter(exit_reason=ExitReason.UNREPORTED).count() >= 2)
    call_command(command, crawl.pk, stdout=io.StringIO())
    asked = db_now()
    drive(runner, is_final(crawl), timeout=30)

    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED  # nothing was archived
    assert not crawl.processes.filter(started_at__gt=asked).exists()
    assert not crawl.processes.filter(status__in=["starting", "running"]).exists()
    assert Crawl.objects.get(pk=crawl.pk).retry_at is None


def test_a_size_limit_holds_across_sessions_and_stops_the_crawl(make_runner, make_crawl):
    with serve_site(pages=300) as site:
        crawl = make_crawl(site.url, size_limit=60_000)
        drive(make_runner(clock=db_now), is_final(crawl), timeout=90)

    crawl.refresh_from_db()
    assert (crawl.status, crawl.stop_reason) == (S.STOPPED_SIZE_LIMIT, "size_limit"), crawl.error
    assert 60_000 <= crawl.size_bytes < 2 * 60_000
    assert crawl.processes.count() <= 2 and crawl.files.count() == crawl.processes.count()

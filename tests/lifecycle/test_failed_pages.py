"""Retrying exactly the failed pages of a finished crawl, into the same crawl."""

from __future__ import annotations

import pytest

from archiver.errors import NotAllowed
from crawls.models import Crawl, CrawlEvent, CrawlStatus, Snapshot, SnapshotStatus
from tests.lifecycle.claiming import NOW

S = CrawlStatus
FAILED = SnapshotStatus.FAILED


@pytest.fixture
def finished_with_failures(make_crawl):
    def make(status=S.COMPLETE):
        crawl = make_crawl(status, finished_at=NOW, retry_at=None, started_at=NOW, pages_found=4,
                           pages_done=2, pages_failed=2, size_bytes=1000, stalls=1,
                           config={"page_limit": 4, "time_limit": 60, "depth": 3, "exclude": ["x"]})
        for i, status in enumerate([SnapshotStatus.DONE, FAILED, SnapshotStatus.DONE, FAILED]):
            Snapshot.objects.create(crawl=crawl, url=f"https://example.com/{i}", status=status,
                                    error="timeout" if status == FAILED else "")
        return crawl

    return make


def test_failed_pages_lists_the_snapshots_that_failed(finished_with_failures):
    crawl = finished_with_failures()
    assert [s.url for s in crawl.failed_pages()] == ["https://example.com/1", "https://example.com/3"]


@pytest.mark.parametrize("status", [*S.SUCCESSFUL, S.FAILED])
def test_retrying_failed_pages_queues_a_new_session_of_exactly_those_pages(finished_with_failures, status):
    crawl = finished_with_failures(status)
    assert crawl.retry_failed_pages(NOW) == 2
    crawl.refresh_from_db()
    assert (crawl.status, crawl.retry_at, crawl.finished_at, crawl.attempts) == (S.QUEUED, NOW, None, 2)
    assert crawl.config_override == {
        "seeds": ["https://example.com/1", "https://example.com/3"], "scope_type": "page",
        "depth": 0, "extra_hops": 0, "page_limit": 2, "size_limit": None, "time_limit": None,
        "seed_file": None, "sitemap": None, "sitemap_since": None,  # the failed pages only
    }
    session = crawl.launch_config()
    assert (session.seeds, session.scope_type, session.depth, session.exclude) == (
        ["https://example.com/1", "https://example.com/3"], "page", 0, ["x"])
    assert crawl.crawl_config.depth == 3  # the crawl's own config is kept
    assert list(crawl.snapshots.values_list("status", flat=True)) == ["done", "queued", "done", "queued"]
    assert not crawl.snapshots.filter(status=SnapshotStatus.QUEUED).exclude(error="").exists()


def test_the_crawls_progress_and_archive_are_kept(finished_with_failures):
    crawl = finished_with_failures()
    crawl.retry_failed_pages(NOW)
    crawl.refresh_from_db()
    assert (crawl.pages_found, crawl.pages_done, crawl.pages_failed, crawl.size_bytes) == (4, 2, 0, 1000)
    assert (crawl.started_at, crawl.stalls, crawl.stop_reason) == (NOW, 0, "")
    assert CrawlEvent.objects.filter(crawl=crawl).last().name == "crawl.queued"


def test_a_crawl_without_failed_pages_is_refused(make_crawl):
    crawl = make_crawl(S.COMPLETE, finished_at=NOW)
    with pytest.raises(NotAllowed, match="has no failed pages to retry"):
        crawl.retry_failed_pages(NOW)


@pytest.mark.parametrize("status", [*S.ACTIVE, S.CANCELED, S.SKIPPED_QUOTA_REACHED])
def test_only_a_finished_crawl_with_its_archive_can_retry_its_pages(finished_with_failures, status):
    crawl = finished_with_failures(status)
    with pytest.raises(NotAllowed, match="cannot retry the failed pages of crawl"):
        crawl.retry_failed_pages(NOW)
    assert crawl.failed_pages().count() == 2


def test_a_full_retry_after_a_failed_pages_session_crawls_the_whole_config_again(finished_with_failures):
    crawl = finished_with_failures()
    crawl.retry_failed_pages(NOW)
    Crawl.objects.filter(pk=crawl.pk).update(status=S.FAILED, finished_at=NOW, retry_at=None)
    crawl.refresh_from_db()
    crawl.retry(NOW)
    crawl.refresh_from_db()
    assert crawl.config_override == {} and crawl.launch_config().depth == 3

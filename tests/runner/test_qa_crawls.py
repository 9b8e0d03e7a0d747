"""A crawl added with --qa: archiver's own crawler (a local process) crawls a site on
127.0.0.1, the runner ends it and queues its review, and the runner's review step replays
the kept WACZ in a real Chromium; the crawl ends with PageReview rows and scores, its
review `done`, and the crawl's own state untouched."""

from __future__ import annotations

import pytest
from archiver_crawler.browser import find_chromium

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, PageReview, QualityReview, ReviewStatus, review_state
from runner.launchers import LocalLauncher
from tests.runner.helpers import is_final
from tests.sitegen import serve_site
from tests.waiting import drive

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")]


def test_a_crawl_with_qa_ends_with_scored_page_reviews(make_runner, make_crawl, settings):
    # A lease the review outlives: its renewals are exercised (every lease / 3).
    local = settings.model_copy(update={"chromium": CHROMIUM, "lease_seconds": 6})
    with serve_site() as site:
        crawl = make_crawl(site.url, qa=True)
        assert crawl.config["qa"] is True
        runner = make_runner(LocalLauncher(local), settings=local, clock=db_now)
        drive(runner, is_final(crawl), timeout=120)
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    review = QualityReview.objects.get(crawl=crawl)
    # Its files are kept: due at once, not after the grace.
    assert review.status == ReviewStatus.QUEUED and review.retry_at <= db_now()

    # Runner-step-driven, as `run --drain` does it (the daemon runs the same review_next in
    # its QaWorker thread; tests/runner/test_qa_queue.py shows its tick never does): one
    # thread, as the in-memory test database has no busy wait for concurrent writers.
    runner.start_reviews("drain")
    drive(runner, lambda: QualityReview.objects.get(crawl=crawl).status not in
          (ReviewStatus.QUEUED, ReviewStatus.RUNNING), timeout=180)
    review.refresh_from_db()
    assert review.status == ReviewStatus.DONE, review.error
    assert review.attempts == 1 and review.retry_at is None and review.pages >= 2
    rows = list(PageReview.objects.filter(crawl=crawl))
    assert len(rows) == review.pages and site.url in {row.url for row in rows}
    for row in rows:
        assert row.error == "" and row.score is not None, row.__dict__
        assert (local.data_dir / row.replay_shot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Its HTML pages replay as captured (a redirect's own record has no text to compare).
    pages = {row.url: row for row in rows}
    for url in (site.url, site.url + "a.html"):
        assert pages[url].text_score >= 0.9 and pages[url].score >= 0.8, pages[url].__dict__
    state = review_state(crawl)
    assert state["status"] == "done" and state["pages"] == len(rows) and state["mean"] > 0
    assert Crawl.objects.get(pk=crawl.pk).status == CrawlStatus.COMPLETE  # the review changes no state

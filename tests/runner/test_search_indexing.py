"""A real crawl by archiver's crawler (a local process, the private Redis, the site on
127.0.0.1): the daemon keeps its WACZ, and a periodic step after supervision indexes the
page text it holds, so search finds its pages."""

from __future__ import annotations

import pytest

from crawls import search
from crawls.lease import db_now
from crawls.models import CrawlStatus
from tests.runner.helpers import is_final
from tests.sitegen import serve_site
from tests.waiting import drive

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_the_daemon_indexes_a_kept_crawl_and_search_finds_its_pages(make_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    for _ in range(3):  # the step indexes one kept file per tick
        runner.tick(db_now())
    (kept,) = crawl.files.all()
    assert kept.indexed_at is not None and kept.index_error == ""
    hits = search.search("A2", crawl=crawl.pk)
    assert hits[0].url == site.root + "/site/a2.html" and hits[0].title == "A2"
    assert search.search('"lorem ipsum dolor"', crawl=crawl.pk, limit=50)

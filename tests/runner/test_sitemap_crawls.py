"""`--sitemap-since last` through the runner: the start of the last complete crawl of the
same seeds is handed to the crawler, which then visits only the sitemap pages changed since."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, Snapshot
from runner.launch import sitemap_since_last
from tests.runner.helpers import is_final
from tests.sitegen import Response, html, serve_site
from tests.waiting import drive

S = CrawlStatus
pytestmark = [pytest.mark.django_db]
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(*entries: tuple[str, str]) -> bytes:
    urls = "".join(f"<url><loc>{loc}</loc><lastmod>{mod}</lastmod></url>" for loc, mod in entries)
    return f"<urlset {NS}>{urls}</urlset>".encode()


def done_urls(crawl: Crawl) -> set[str]:
    return set(Snapshot.objects.filter(crawl=crawl, status="done").values_list("url", flat=True))


def test_last_is_the_start_of_the_last_complete_crawl_of_the_same_seeds(make_crawl):
    t0 = dt.datetime(2026, 5, 1, 10, 0, 0, 500_000, tzinfo=dt.UTC)
    seeds = ("http://127.0.0.1:9/site/",)
    for hours, status, crawl_seeds in ((0, S.COMPLETE, seeds), (1, S.COMPLETE, seeds),
                                       (2, S.FAILED, seeds), (3, S.COMPLETE, ("http://127.0.0.1:9/other/",))):
        earlier = make_crawl(*crawl_seeds)
        Crawl.objects.filter(pk=earlier.pk).update(status=status, started_at=t0 + dt.timedelta(hours=hours))
    crawl = make_crawl(*seeds, sitemap="auto", sitemap_since="last")
    now = t0 + dt.timedelta(hours=5)
    assert sitemap_since_last(crawl, now) == {"sitemapFromDate": "2026-05-01T11:00:00Z"}
    assert sitemap_since_last(make_crawl("http://127.0.0.1:9/new/"), now) == {}


@pytest.mark.slow
def test_a_recrawl_since_last_visits_only_the_sitemap_pages_changed_since_the_last_crawl(
        make_runner, make_crawl):
    extra = {"/site/old.html": Response(body=html("Old", [])),
             "/site/new.html": Response(body=html("New", [])),
             "/sitemap.xml": Response(content_type="application/xml")}
    options = {"sitemap": "auto", "sitemap_since": "last", "depth": 0}
    with serve_site(extra=extra) as site:
        old, new = site.root + "/site/old.html", site.root + "/site/new.html"
        extra["/sitemap.xml"].body = urlset((old, "2020-01-01"), (new, "2020-01-02"))
        first = make_crawl(site.url, **options)
        runner = make_runner(clock=db_now)
        drive(runner, is_final(first))
        first.refresh_from_db()
        assert first.status == S.COMPLETE, first.error
        assert done_urls(first) == {site.url, old, new}  # no complete crawl before: every page

        changed = (first.started_at + dt.timedelta(seconds=1)).isoformat()
        extra["/sitemap.xml"].body = urlset((old, "2020-01-01"), (new, changed))
        site.reset_counts()
        second = make_crawl(site.url, **options)
        drive(runner, is_final(second))
    second.refresh_from_db()
    assert second.status == S.COMPLETE, second.error
    assert done_urls(second) == {site.url, new}
    assert site.requests["/site/old.html"] == 0

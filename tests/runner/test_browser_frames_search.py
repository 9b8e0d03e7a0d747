"""A browser-mode crawl by archiver's own crawler (a local process, the host's Chromium, a site
on 127.0.0.1) asked for thumbnails: every page has its `urn:thumbnail:` record in the kept
WACZ, and the words inside a page's iframe find that page in search (issue 44)."""

from __future__ import annotations

import zipfile

import pytest
from archiver_crawler.browser import find_chromium

from crawls import kept_wacz, search
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.launchers import LocalLauncher
from tests.runner.helpers import is_final
from tests.sitegen import Response, serve_site
from tests.waiting import drive

CHROMIUM = find_chromium()
PAGES = 3
WORDS = ("alderfly", "bittern", "cormorant")  # one word per page, only inside its iframe
pytestmark = [pytest.mark.django_db, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")]


def framed_pages() -> dict[str, Response]:
    links = "".join(f'<a href="/f/p{n}.html">page {n}</a>' for n in range(1, PAGES))
    routes = {}
    for n in range(PAGES):
        path = "/f/" if n == 0 else f"/f/p{n}.html"
        body = (f"<!doctype html><title>Framed {n}</title><h1>Framed page {n}</h1>{links if n == 0 else ''}"
                f'<iframe src="/f/frame{n}.html"></iframe>')
        routes[path] = Response(body=body.encode())
        routes[f"/f/frame{n}.html"] = Response(body=f"<!doctype html><p>the {WORDS[n]} nests here</p>".encode())
    return routes


def index_urls(path) -> list[str]:
    with zipfile.ZipFile(path) as archive:
        data = next(d for d in map(lambda n: kept_wacz.read_member(archive, n), kept_wacz.INDEX_MEMBERS) if d)
    return [str((kept_wacz.parse_cdxj(line) or {}).get("url", "")) for line in data.decode().splitlines()]


def test_every_page_has_a_thumbnail_and_its_iframe_s_words_find_it(make_runner, make_crawl, settings):
    local = settings.model_copy(update={"chromium": CHROMIUM})
    with serve_site(extra=framed_pages()) as site:
        crawl = make_crawl(site.root + "/f/", browser=True, screenshot=["thumbnail"])
        runner = make_runner(LocalLauncher(local), settings=local, clock=db_now)
        drive(runner, is_final(crawl), timeout=120)
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    pages = [site.root + "/f/", *(f"{site.root}/f/p{n}.html" for n in range(1, PAGES))]
    assert set(crawl.snapshots.filter(status="done").values_list("url", flat=True)) >= set(pages)

    (kept,) = crawl.files.all()
    urls = index_urls(local.data_dir / kept.path)
    assert {f"urn:thumbnail:{page}" for page in pages} <= set(urls)

    for _ in range(3):  # the indexing step takes one kept file per tick
        runner.tick(db_now())
    for n, word in enumerate(WORDS):
        hits = search.search(word, crawl=crawl.pk)
        assert [hit.url for hit in hits] == [pages[n]], word

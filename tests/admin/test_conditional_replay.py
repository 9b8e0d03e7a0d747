"""A conditional recrawl end to end, in a real installation and a real Chromium: the second
`--dedup` crawl of an unchanged site that honours conditional requests asks for its pages
with their kept validators, is answered 304, keeps `server-not-modified` revisits, names the
first crawl's archive as the one it depends on, replays its unchanged page from that archive,
and its pages are found by search with the kept page's text."""

from __future__ import annotations

import zipfile
from urllib.parse import quote

import pytest

from tests.admin.browsing import log_in, wait_for_replayed_text
from tests.admin.test_dedup_replay import crawled
from tests.conditional_site import serve_conditional
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def test_a_conditional_recrawl_keeps_304s_as_revisits_that_replay(installation, admin_url,
                                                                  browser, shots):
    with serve_conditional(pages=12) as site:
        installation.start_daemon()
        first = crawled(installation, site.url)
        wait_for(lambda: installation.query(
            "SELECT count(*) FROM crawls_crawlfile WHERE crawl_id = ? AND payloads_indexed", first) >= [(1,)],
            timeout=60, what="the first crawl's payloads indexed")
        site.reset_counts()
        second = crawled(installation, site.url)

    asked = sum(1 for path in site.pages if site.conditional[path])
    assert asked >= 0.9 * len(site.pages), (asked, len(site.pages))
    assert sum(site.not_modified.values()) >= len(site.pages)

    (required,) = installation.query(
        "SELECT r.path FROM crawls_filedependency d JOIN crawls_crawlfile f ON f.id = d.file_id "
        "JOIN crawls_crawlfile r ON r.id = d.required_id WHERE f.crawl_id = ?", second)
    assert required[0].startswith(f"archives/{first}/")
    ((path,),) = installation.query("SELECT path FROM crawls_crawlfile WHERE crawl_id = ?", second)
    profiles = server_not_modified(installation.data_dir / path)
    assert len(profiles) >= len(site.pages), profiles

    story = site.root + "/cond/p3.html"
    wait_for(lambda: installation.query(
        "SELECT count(*) FROM crawls_pagetext WHERE crawl_id = ? AND url = ? AND title = 'Page 3'",
        second, story) == [(1,)], timeout=60, what="the unchanged page's kept text indexed for the recrawl")

    log_in(browser, admin_url, installation)
    browser.get(f"{admin_url}/admin/crawls/crawl/{second}/replay/?url={quote(story)}")
    wait_for_replayed_text(browser, shots, "The tide comes in", "conditional-replay")


def server_not_modified(wacz_path) -> list[str]:
    from warcio.archiveiterator import ArchiveIterator

    found = []
    with zipfile.ZipFile(wacz_path) as wacz:
        for name in wacz.namelist():
            if name.endswith(".warc.gz"):
                with wacz.open(name) as fh:
                    found += [r.rec_headers.get_header("WARC-Target-URI") for r in ArchiveIterator(fh)
                              if r.rec_headers.get_header("WARC-Profile", "").endswith("/server-not-modified")]
    return found

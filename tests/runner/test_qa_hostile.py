"""A hostile page cannot hold the quality review (issue 36): a page whose script keeps its
renderer busy once loaded held the review 126 s in real Chromium (the engine waits for the
load, then for each script's answer, then replaces the browser and tries the page again),
and the review worker ran one review at a time, so another org's waited. Now each page is
replayed and scored within its deadline, else failed with that reason and not tried again;
and one org's reviews take at most one of the worker's lanes."""

from __future__ import annotations

import pytest
from archiver_crawler.browser import BrowserEngine, find_chromium

from crawls.models import PageReview
from runner import qa
from tests.crawler.conftest import spawn  # noqa: F401  (the fixture)
from tests.sitegen import Response, serve_site
from tests.test_qa import kept_crawl, qa_settings  # noqa: F401  (a fixture)

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")]
# Once loaded, the page never gives its renderer back: no script answers, no screenshot.
HOSTILE = (b"<!doctype html><title>Busy</title><body><h1>a page that never lets go</h1>"
           b"<script>addEventListener('load', () => { for (;;) {} })</script></body>")


def hostile_site() -> dict[str, Response]:
    return {
        "/h/": Response(body=b'<!doctype html><title>Home</title><body><p>the home page of the site</p>'
                             b'<a href="/h/busy.html">busy</a> <a href="/h/plain.html">plain</a></body>'),
        "/h/busy.html": Response(body=HOSTILE),
        "/h/plain.html": Response(body=b"<!doctype html><title>Plain</title><body><p>plain words "
                                       b"of a plain page</p></body>"),
    }


def crawled_hostile_site(spawn, settings):  # noqa: F811
    """The site crawled from 127.0.0.1 by archiver's crawler (HTTP mode: nothing runs its
    script), kept as a crawl's archive; the site is gone before the replay."""
    with serve_site(extra=hostile_site()) as site:
        run = spawn(site.root + "/h/", "--generateWACZ", "--text", "to-pages", "--depth", "1",
                    "--scopeType", "prefix")
        assert run.wait(120) == 0, run.stderr
    return site.root, kept_crawl(settings.data_dir, run.collection.wacz)


@pytest.fixture
def attempts(monkeypatch):
    """Each page's tries in the browser engine, by URL."""
    tried: dict[str, int] = {}
    capture_in = BrowserEngine._capture_in

    async def counted(self, browser, url, options, *slot):
        tried[url] = tried.get(url, 0) + 1
        return await capture_in(self, browser, url, options, *slot)

    monkeypatch.setattr(BrowserEngine, "_capture_in", counted)
    return tried


def test_a_page_that_holds_its_renderer_is_failed_at_its_deadline_and_the_others_are_scored(
        spawn, qa_settings, attempts):  # noqa: F811
    root, crawl = crawled_hostile_site(spawn, qa_settings)
    # Below the engine's own bounds (30 s for the load, 30 s for a script's answer, then a
    # new browser and a second try), so the deadline is what ends the page.
    assert qa.review(crawl, qa_settings, page_seconds=20) == 3
    rows = {row.url: row for row in PageReview.objects.filter(crawl=crawl)}
    busy = rows[f"{root}/h/busy.html"]
    assert busy.error == "not replayed and scored within the page's 20 s", busy.__dict__
    assert (busy.score, busy.text_score, busy.resources_score, busy.replay_shot) == (0.0, None, None, "")
    assert attempts[f"{root}/h/busy.html"] == 1  # not tried again in a new browser
    for path in ("/h/", "/h/plain.html"):
        row = rows[root + path]
        assert row.error == "" and row.text_score >= 0.9 and row.score > 0, row.__dict__

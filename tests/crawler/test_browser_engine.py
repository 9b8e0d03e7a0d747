"""The browser engine (archiver_crawler.browser) on real Chromium and real local servers:
script-built links and fetched data captured, every request under the address policy, a
killed or hung browser replaced, and the page's text, screenshot and page info recorded.

These tests drive the engine directly; the crawler's --browser mode end to end is
tests/crawler/test_browser_mode.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from archiver_crawler.browser import (
    BrowserEngine,
    EngineOptions,
    LoadState,
    PageOptions,
    find_chromium,
    write_capture,
)
from archiver_crawler.browser.process import chromium_args
from archiver_crawler.netpolicy import AddressPolicy, parse_networks
from archiver_crawler.warc import WarcFile
from warcio.archiveiterator import ArchiveIterator

from tests.crawler.hosts import PNG, Route, page, serve
from tests.jssite import js_pages, js_site
from tests.sitegen import serve_site
from tests.waiting import HANG

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="no Chromium (apt-get install chromium)")

ONLY_127_0_0_1 = AddressPolicy(parse_networks(["127.0.0.1/32"]))


def engine(policy: AddressPolicy = ONLY_127_0_0_1, **page_options) -> BrowserEngine:
    return BrowserEngine(policy, EngineOptions(workers=2, page=PageOptions(**page_options)))


def run(test: Callable, *args, **page_options):
    """Run `test(engine, *args)` against a started engine, closed afterwards."""
    async def main():
        browser = engine(**page_options)
        await browser.start()
        try:
            return await test(browser, *args)
        finally:
            await browser.close()
    return asyncio.run(main())


async def until(predicate: Callable[[], object], timeout: float = 30, what: str = "state"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        await asyncio.sleep(0.02)


def records(directory: Path) -> list:
    found = []
    for path in sorted(directory.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                found.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                              record.http_headers, record.raw_stream.read()))
    return found


# --- what a page gives ---------------------------------------------------------------------


def test_script_built_links_and_fetched_json_are_captured():
    with serve_site(extra=js_site(6)) as site:
        capture = run(lambda e: e.capture(site.root + "/js/"), wait_until=("load", "networkidle2"))
    assert capture.error == ""
    assert capture.status == 200
    assert capture.load_state == LoadState.EXTRACTION_DONE
    # p1, p2 drawn by the script, p3, p4 from the JSON it fetched: none is in the HTML.
    assert set(capture.links) == js_pages(site.root, 4) - {site.root + "/js/"}
    fetched = {r.url: r for r in capture.resources}
    json_url = site.root + "/js/links/0.json"
    assert fetched[json_url].exchange.status == 200
    assert fetched[json_url].resource_type in ("XHR", "Fetch")
    assert {site.root + p for p in ("/js/app.js", "/js/style.css", "/js/logo.png")} <= set(fetched)
    assert "drawn by script on page 0" in capture.text


def test_records_hold_the_bytes_as_sent_and_the_text_view_and_page_info(tmp_path):
    with serve_site(extra=js_site(2)) as site:
        capture = run(lambda e: e.capture(site.root + "/js/"), screenshots=("view",))
    warc = WarcFile(tmp_path, "inst", "coll")
    write_capture(warc, capture, "page-1")
    warc.close()
    found = {(kind, uri): (headers, body) for kind, uri, headers, body in records(tmp_path)}
    css_headers, css_body = found[("response", site.root + "/js/style.css")]
    # The server gzip-encoded the stylesheet: the WARC keeps those bytes, the browser
    # was handed them decoded (the page's style applied is not checked here).
    assert css_headers.get_header("Content-Encoding") == "gzip"
    assert css_body.startswith(b"\x1f\x8b")
    assert ("request", site.root + "/js/links/0.json") in found
    url = site.root + "/js/"
    assert "drawn by script" in found[("resource", f"urn:text:{url}")][1].decode()
    assert found[("resource", f"urn:view:{url}")][1].startswith(b"\x89PNG")
    info = json.loads(found[("resource", f"urn:pageinfo:{url}")][1])
    assert info["status"] == 200 and info["pageid"] == "page-1"
    assert info["urls"][site.root + "/js/links/0.json"]["status"] == 200
    assert info["counts"]["fetched"] == len(capture.exchanges) >= 5
    assert info["counts"]["refused"] == 0


def test_a_redirect_is_followed_hop_by_hop_and_each_hop_is_an_exchange():
    with serve_site() as site:
        capture = run(lambda e: e.capture(site.root + "/site/moved"))
    hops = [(r.url, r.exchange.status) for r in capture.documents()]
    assert hops == [(site.root + "/site/moved", 301), (site.root + "/site/target.html", 200)]
    assert capture.final_url == site.root + "/site/target.html"
    assert capture.status == 200


def test_a_gzip_encoded_page_is_read_decoded():
    with serve_site() as site:
        capture = run(lambda e: e.capture(site.root + "/site/b.html"))
    assert capture.title == "B"
    assert site.root + "/site/b1.html" in capture.links


# --- the address policy --------------------------------------------------------------------


def refused_routes(refused: str, literal: str) -> dict[str, Route]:
    """A page on the allowed server whose every kind of request points at the refused one."""
    body = (f'<script src="{refused}/script.js"></script>'
            f'<img src="{refused}/image.png"><img src="{literal}/literal.png">'
            f'<iframe src="{refused}/frame.html"></iframe>'
            f'<link rel="stylesheet" href="{refused}/style.css">'
            f'<link rel="prefetch" href="{refused}/prefetch">'
            '<img src="/bounce.png"><iframe src="/bounce-frame"></iframe>'
            f'<video src="{refused}/movie.mp4" autoplay muted></video>'
            f"<script>fetch('{refused}/api.json').catch(() => {{}});"
            f"navigator.sendBeacon('{refused}/beacon');"
            f"try {{ new WebSocket('{refused.replace('http', 'ws')}/socket'); }} catch (e) {{}}"
            f"const x = new XMLHttpRequest(); x.open('GET', '{refused}/xhr'); x.send();"
            "document.title = 'ran';</script>")
    return {
        "/": page("policy", body),
        "/bounce.png": Route(302, b"", "text/plain", {"Location": f"{refused}/bounced.png"}),
        "/bounce-frame": Route(302, b"", "text/plain", {"Location": f"{refused}/bounced.html"}),
        "/ok.png": Route(200, PNG, "image/png"),
    }


def test_requests_to_refused_addresses_never_reach_their_server():
    with serve({"/": page("secret", "secret"), "/image.png": Route(200, PNG, "image/png")},
               host="127.0.0.2") as other:
        routes: dict[str, Route] = {}
        with serve(routes) as allowed:
            refused = other.url("").rstrip("/")
            routes.update(refused_routes(refused, f"http://2130706434:{other.port}"))
            capture = run(lambda e: e.capture(allowed.url("/")), wait_until=("load",),
                          behaviors=("autoplay",), behavior_timeout=1)
            direct = run(lambda e: e.capture(other.url("/")))
    assert other.hits == []
    assert capture.title == "ran"
    refusals = {r.url for r in capture.resources if r.refused}
    assert {refused + p for p in ("/script.js", "/image.png", "/frame.html", "/api.json",
                                  "/bounced.png", "/bounced.html", "/xhr")} <= refusals
    assert all("refused by the crawl address policy" in r.error
               for r in capture.resources if r.refused)
    assert all(r.exchange is None for r in capture.resources if r.refused)
    assert direct.load_state == LoadState.FAILED
    assert "refused by the crawl address policy: 127.0.0.2" in direct.error


# --- a browser that dies or hangs ----------------------------------------------------------


def test_a_killed_browser_is_replaced_and_its_page_loaded_again():
    async def test(e: BrowserEngine, site):
        first = e.browser
        site.hold()
        loading = asyncio.create_task(e.capture(site.url))
        await until(lambda: site.requests["/site/"] >= 1, what="the page requested")
        first.kill()
        await until(lambda: first.connection.closed.is_set(), what="the pipe closed")
        site.release()
        return first, await loading

    with serve_site() as site:
        first, capture = run(test, site)
    assert capture.error == "" and capture.status == 200
    assert site.requests["/site/"] == 2
    assert not first.alive() and not first.profile.exists()


def test_a_hung_browser_is_detected_killed_and_replaced():
    async def test(e: BrowserEngine, url):
        first = e.browser
        os.killpg(first.pid, signal.SIGSTOP)
        started = time.monotonic()
        capture = await e.capture(url)
        return first, capture, time.monotonic() - started, e.restarts

    with serve_site() as site:
        async def main():
            browser = BrowserEngine(ONLY_127_0_0_1, EngineOptions(
                hang_margin=0.5, page=PageOptions(page_load_timeout=3, settle_timeout=0.5)))
            await browser.start()
            try:
                return await test(browser, site.url)
            finally:
                await browser.close()
        first, capture, took, restarts = asyncio.run(main())
    assert restarts == 1, capture
    assert capture.status == 200 and capture.error == ""
    assert not first.alive()
    assert took < HANG  # a stopped browser never answers: only the hang check ends the wait


def test_the_browser_group_and_profile_are_gone_after_close():
    async def test(e: BrowserEngine):
        return e.browser, e.browser.group_pids(), e.browser.profile

    browser, pids, profile = run(test)
    assert len(pids) >= 2  # the browser and its helpers (zygote, GPU/utility processes)
    assert not browser.alive()
    assert browser.group_pids() == []
    assert not profile.exists()


# --- waits and behaviors -------------------------------------------------------------------

ENDLESS = page("endless", """<div id="feed"></div><script>
let n = 0;
function more() {
  for (let i = 0; i < 5; i++, n++) {
    const d = document.createElement('div'); d.style.height = '400px';
    d.innerHTML = '<a href="/item' + n + '">item ' + n + '</a>';
    document.getElementById('feed').appendChild(d);
  }
}
more();
window.addEventListener('scroll', () => {
  if (window.scrollY + window.innerHeight > document.body.scrollHeight - 500) more();
});
</script>""")


def test_autoscroll_finds_what_scrolling_draws_and_stops_at_its_bound():
    with serve({"/": ENDLESS}) as site:
        still = run(lambda e: e.capture(site.url("/")))
        started = time.monotonic()
        scrolled = run(lambda e: e.capture(site.url("/")), behaviors=("autoscroll",),
                       behavior_timeout=2)
        took = time.monotonic() - started
    assert len(still.links) == 5
    assert len(scrolled.links) > 20  # an endless page: only the bound stops the scrolling
    assert scrolled.load_state == LoadState.BEHAVIORS_DONE
    assert took < HANG  # the page is endless: only the bound ends the scrolling


def test_post_load_delay_lets_late_scripts_draw_their_links():
    late = page("late", "<script>setTimeout(() => { const a = document.createElement('a');"
                        "a.href = '/late'; document.body.appendChild(a); }, 1500);</script>")
    with serve({"/": late}) as site:
        early = run(lambda e: e.capture(site.url("/")), wait_until=("load",))
        waited = run(lambda e: e.capture(site.url("/")), wait_until=("load",),
                     post_load_delay=2.5)
    assert site.url("/late") not in early.links
    assert site.url("/late") in waited.links


def test_a_page_that_never_loads_fails_at_its_timeout():
    with serve_site() as site:
        site.hold()
        started = time.monotonic()
        capture = run(lambda e: e.capture(site.url), page_load_timeout=1, settle_timeout=0.2)
        took = time.monotonic() - started
        site.release()
    assert capture.load_state == LoadState.FAILED
    assert "did not load within 1 s" in capture.error
    assert took < HANG  # the site holds the page until released: only the timeout ends it


def test_several_pages_load_at_once_in_one_browser():
    async def test(e: BrowserEngine, site):
        urls = sorted(js_pages(site.root, 5))
        return await asyncio.gather(*(e.capture(u) for u in urls)), e.restarts

    with serve_site(extra=js_site(5)) as site:
        captures, restarts = run(test, site)
    assert restarts == 0
    assert all(c.status == 200 and c.error == "" for c in captures)
    assert all("drawn by script on page" in c.text for c in captures)


# --- the flags ----------------------------------------------------------------------------


def test_the_sandbox_is_kept_unless_it_cannot_be_had(tmp_path):
    from archiver_crawler.browser.process import Limits

    assert "--no-sandbox" not in chromium_args(tmp_path, Limits())
    assert "--no-sandbox" in chromium_args(tmp_path, Limits(), sandbox=False)
    args = chromium_args(tmp_path, Limits())
    assert "--proxy-server=127.0.0.1:9" in args and "--proxy-bypass-list=<-loopback>" in args
    assert "--remote-debugging-pipe" in args
    assert not any(a.startswith("--remote-debugging-port") for a in args)

"""A crawl in browser mode (archiver's own crawler driving the host's Chromium) replayed in
the admin, in a real Chromium: the page's script-drawn text shows, because what the script
loaded (app.js, the JSON it fetched) was archived from the browser's network layer. Its pages
are listed page by page with the thumbnails a browser crawl takes by default, and a crawl is
watched live (issue 41)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from tests.admin.browsing import log_in, wait_for_replayed_text, wait_until
from tests.jssite import js_pages, js_site
from tests.sitegen import Response, serve_site

CHROMIUM = "/usr/bin/chromium"
PAGES = 7
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")]


def test_a_browser_mode_crawl_replays_with_its_script_drawn_content(installation, admin_url, browser, shots):
    installation.env["ARCHIVER_CHROMIUM"] = CHROMIUM
    with serve_site(extra=js_site(PAGES)) as site:
        seed = site.root + "/js/"
        crawl_id = installation.manage("add", seed, "--browser").strip()
        installation.start_daemon()
        state = installation.wait(crawl_id, lambda c: c["status"] in ("complete", "failed"), timeout=240)
    assert state["status"] == "complete", state
    archived = {url for (url,) in installation.query(
        "SELECT url FROM crawls_snapshot WHERE crawl_id = ? AND status = 'done'", crawl_id)}
    assert js_pages(site.root, PAGES) <= archived  # links only the script draws, all followed

    log_in(browser, admin_url, installation)
    # p7 is linked from the JSON that p1's script fetches: nothing of it is in any HTML.
    for page in ("", "p7.html"):
        url = seed + page
        browser.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/replay/?url={quote(url)}")
        number = page.removeprefix("p").removesuffix(".html") or "0"
        wait_for_replayed_text(browser, shots, f"drawn by script on page {number}", f"replay-{number}")

    # No --screenshot given: a thumbnail of every page, shown on the crawl's page list.
    browser.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/pages/")
    cards = wait_until(lambda: _cards(browser) if _loaded(_cards(browser)) else None,
                       60, "every page's card with its thumbnail loaded")
    shots.take("pages")
    listed = {url for (url,) in installation.query("SELECT url FROM crawls_snapshot WHERE crawl_id = ?", crawl_id)}
    assert {card["url"] for card in cards} == listed >= archived
    assert all(card["thumb"] == [640, 360] and card["title"] and card["href"] for card in cards), cards
    replayed = next(card for card in cards if card["url"] == seed + "p7.html")
    assert f"/admin/crawls/crawl/{crawl_id}/replay/?url=" in replayed["href"]


CARDS_JS = """
return [...document.querySelectorAll('.crawl-page')].map(card => {
  const img = card.querySelector('img'), link = card.querySelector('a');
  return {url: card.querySelector('.crawl-page-url').title, title: card.querySelector('b').textContent,
          href: link && link.href, facts: card.querySelector('.crawl-page-facts').textContent,
          thumb: img && img.complete ? [img.naturalWidth, img.naturalHeight] : null};
});
"""


def _cards(browser) -> list[dict]:
    return browser.execute_script(CARDS_JS)


def _loaded(cards: list[dict]) -> bool:
    return bool(cards) and all(card["thumb"] and card["thumb"][0] for card in cards)


WATCHED = {  # a red page whose image answers long after the test: its tab stays open
    "/w/": Response(body=b"<!doctype html><title>Watched</title><style>html,body{margin:0;height:100%;"
                         b"background:rgb(200,20,20)}</style><h1>watched</h1><img src=/w/slow.png>"),
    "/w/slow.png": Response(body=b"", content_type="image/png", delay=600),
}

FRAMES_JS = """
return [...document.querySelectorAll('.crawl-watch figure')].map(f => {
  const img = f.querySelector('img');
  return {caption: f.querySelector('figcaption').textContent,
          size: img.complete ? [img.naturalWidth, img.naturalHeight] : null};
});
"""


def test_the_watch_page_shows_the_crawling_tab_through_the_daemon_s_redis(installation, admin_url, browser, shots):
    # The whole way a user has: the daemon's embedded Redis, archiver's crawler in browser
    # mode, the admin under gunicorn reading the frames, the page drawing them in Chromium.
    installation.env["ARCHIVER_CHROMIUM"] = CHROMIUM
    with serve_site(extra=WATCHED) as site:
        crawl_id = installation.manage("add", site.root + "/w/", "--browser", "--page-load-timeout", "300").strip()
        installation.start_daemon()
        wait_until(lambda: site.requests["/w/slow.png"], 120, "the crawler's tab to load the page")
        log_in(browser, admin_url, installation)
        browser.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/change/")
        browser.find_element("css selector", ".crawl-button-watch").click()
        frames = wait_until(lambda: [f for f in browser.execute_script(FRAMES_JS) if f["size"]], 60,
                            "a frame of the crawling tab on the watch page")
        shots.take("watch")
        assert frames[0]["size"] == [640, 360] and site.root + "/w/" in frames[0]["caption"], frames
        installation.manage("cancel", crawl_id)
        installation.wait(crawl_id, lambda c: c["status"] == "canceled", timeout=120)
    wait_until(lambda: "The crawl is over" in browser.find_element("css selector", ".crawl-watch-why").text,
               30, "the watch page to say the crawl is over")

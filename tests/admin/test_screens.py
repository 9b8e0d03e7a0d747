"""Every admin page, in a real Chromium, at 1,280×800 with the navigation sidebar open and
at 390×844 (a phone): a screenshot of each under test-artifacts/admin-browser/, and no
page scrolls sideways (issue 26). The crawl's page carries a very long but allowed seed;
the diff pages compare two crawls of it, and one of them has a quality review."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.admin.browsing import archived_crawl, log_in, wait_until

pytestmark = pytest.mark.slow

SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
LONG_SEED = "http://localhost:9/" + "a-long-path-segment/" * 60 + "?q=" + "x" * 800


def overflow(driver) -> int:
    return driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth;")


# The innermost elements reaching past the window's right edge, to say what is too wide.
WIDE_ELEMENTS = """
const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
  (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
const right = e => Math.round(e.getBoundingClientRect().right);
const wide = [...document.body.querySelectorAll('*')].filter(e =>
  right(e) > window.innerWidth + 1 && getComputedStyle(e).position !== 'fixed');
const inner = wide.filter(e => !wide.some(o => o !== e && e.contains(o)));
const texts = [];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode() && texts.length < 2) {
  const range = document.createRange();
  range.selectNodeContents(walker.currentNode);
  if (range.getBoundingClientRect().right > window.innerWidth + 1)
    texts.push('text in ' + name(walker.currentNode.parentElement) + ' ' + Math.round(range.getBoundingClientRect().right));
}
return [...wide.slice(0, 6).map(e => name(e) + ' ' + right(e)), '...', ...inner.slice(0, 3).map(e => name(e) + ' ' + right(e)), ...texts];
"""


def pages(installation) -> dict[str, str]:
    crawl_id = installation.manage("add", LONG_SEED, "--limit", "10").strip()
    installation.manage("add", "http://localhost:9/short").strip()
    failed = installation.manage("add", "http://localhost:9/" + "b" * 300).strip()
    installation.query("UPDATE crawls_crawl SET status = 'failed', error = ? WHERE id = ?",
                       "every crawler instance failed (no page succeeded): " + "y" * 300, failed)
    installation.query(
        "INSERT INTO crawls_crawllog (crawl_id, created_at, level, source, message, details, size) "
        "VALUES (?, CURRENT_TIMESTAMP, 'error', ?, ?, '{}', 0)", crawl_id,
        f"crawler-{crawl_id[:8]}-instance-10", "z" * 500)
    # Two archived crawls of the long seed whose page changed: the diff pages (their text
    # table holds long lines) and a collection's own page.
    words = " ".join(f"word{n}" for n in range(400))
    before, after = (archived_crawl(installation, [(LONG_SEED, title, f"<html><head><title>{title}</title></head>"
                                                    f"<body><p>{title} {words}</p></body></html>")])
                     for title in ("Before the change", "After the change"))
    installation.manage("collection", "create", "A collection with a name " + "n" * 60)
    collection = json.loads(installation.manage("collection", "show", "A collection with a name " + "n" * 60,
                                                "--json"))
    installation.manage("collection", "add", collection["name"], before, after)
    installation.query(
        "INSERT INTO crawls_pagereview (crawl_id, url, score, text_score, resources_score, screenshot_score, "
        "resources_total, resources_missing, replay_shot, has_capture_shot, error, reviewed_at) "
        "VALUES (?, ?, 0.41, 0.5, 0.33, NULL, 3, ?, '', 0, '', CURRENT_TIMESTAMP)",
        after, LONG_SEED, json.dumps([LONG_SEED + "/app.js", LONG_SEED + "/style.css"]))
    installation.manage("shell", "--no-imports", "-c", (
        "from crawls.models import Snapshot\n"
        f"Snapshot.objects.create(crawl_id={after!r}, url={LONG_SEED!r}, title='After the change ' * 20, http_status=200)\n"
        f"Snapshot.objects.create(crawl_id={after!r}, url={LONG_SEED + '/gone'!r}, status='failed', error='x' * 300)"))
    return {
        "home": "/admin/",
        "crawl-list": "/admin/crawls/crawl/",
        "crawl-page": f"/admin/crawls/crawl/{crawl_id}/change/",
        "add-form": "/admin/crawls/crawl/add/",
        "log": f"/admin/crawls/crawl/{crawl_id}/log/",
        "pages": "/admin/crawls/snapshot/",
        "orgs": "/admin/crawls/org/",
        "tokens": "/admin/crawls/apitoken/",
        "webhooks": "/admin/crawls/webhook/",
        "deliveries": "/admin/crawls/webhookdelivery/",
        "schedules": "/admin/crawls/schedule/",
        "search": "/admin/search/?q=" + "long" * 60,
        "collections": "/admin/crawls/collection/",
        "collection-add": "/admin/crawls/collection/add/",
        "collection-page": f"/admin/crawls/collection/{collection['id']}/change/",
        "diff": f"/admin/crawls/crawl/{after}/diff/?with={before}",
        "diff-page": f"/admin/crawls/crawl/{after}/diff/?with={before}&page={quote(LONG_SEED)}",
        "quality-review": f"/admin/crawls/crawl/{after}/qa/",
        "crawl-pages": f"/admin/crawls/crawl/{after}/pages/",
        "watch": f"/admin/crawls/crawl/{crawl_id}/watch/",
        "web-captures": "/web/*/" + LONG_SEED,
    }


def test_every_admin_page_fits_a_1280_px_window_with_the_sidebar_open_and_a_390_px_phone(
        installation, admin_url, browser, shots):
    from selenium.webdriver.common.by import By

    driver = browser
    urls = pages(installation)
    log_in(driver, admin_url, installation)
    driver.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true');")
    too_wide = {}
    for size, (width, height) in SIZES.items():
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        for name, path in urls.items():
            driver.get(admin_url + path)
            wait_until(lambda: driver.execute_script("return document.readyState") == "complete",
                       30, f"{name} to load")
            assert driver.execute_script("return window.innerWidth") == width
            assert "/login/" not in driver.current_url
            shots.take(f"{name}-{size}")
            if name == "crawl-page":  # the long seed is whole one click away: its link
                link = driver.find_element(By.CSS_SELECTOR, ".seed-list a")
                assert link.get_attribute("href") == LONG_SEED
            if overflow(driver) > 0:
                too_wide[f"{name} at {width} px"] = (overflow(driver), driver.execute_script(WIDE_ELEMENTS))
    assert too_wide == {}, f"pages that scroll sideways (px too wide, what reaches out): {too_wide}"

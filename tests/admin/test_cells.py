"""Tables that fit (issue 41): on the control room, the crawl list, search, collections,
webhook deliveries and the /web/ pages, at 1,280×800 with the navigation open and at
390×844, in a real Chromium, with the values a busy archive holds (long seeds and org names,
sizes in gigabytes, page counts in the hundreds of thousands, failed runs with long reasons):

- no text runs out of its table cell (a value cut short is cut with … by its own box, and
  its whole value is a title or a link away);
- no short word (20 characters or fewer) breaks over two lines ("I D", "S T A T E");
- no text of six words or more stands one word per line;
- nothing scrolls sideways, neither the page nor a box inside it.
"""

from __future__ import annotations

import json

import pytest

from tests.admin.browsing import archived_crawl, log_in, wait_until

pytestmark = pytest.mark.slow

SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
SITE = "http://127.0.0.1:8001/"
LONG_SEED = SITE + "collections/" + "a-long-path-segment/" * 12 + "?session=" + "x" * 120
LONG_ORG = "The Municipal Archive of Greater Westphalia and the Lower Rhine, Digital Preservation Unit"
REASON = ("connection refused: 127.0.0.1:9 (every instance failed, exit 9); the seed answered nothing "
          "and the crawl archived no page at all, after three attempts of " + "z" * 200)

# Realistic rows, made through the models as the runner would leave them.
ROWS = """
import datetime as dt
from django.utils import timezone
from crawls.config import CrawlConfig
from crawls.models import (Crawl, CrawlEvent, Org, Snapshot, Webhook, WebhookDelivery)
from crawls import actions
now = timezone.now()
org = Org.objects.create(slug="westphalia-digital-preservation-unit", name={org!r},
                         storage_quota_bytes=2 * 10**12, exec_minutes_quota=600000)
def crawl(seed, **fields):
    made = Crawl.create(org, CrawlConfig(seeds=[seed]))
    Crawl.objects.filter(pk=made.pk).update(**fields)
    return Crawl.objects.get(pk=made.pk)
running = crawl({seed!r}, status="running", started_at=now - dt.timedelta(hours=30),
                pages_done=52922, pages_found=529229, pages_failed=12345, size_bytes=55_493_000_000,
                elapsed_seconds=107000)
crawl({site!r} + "docs/3/library/index.html", status="running", started_at=now, pages_done=0,
      pages_found=1, pages_failed=1, size_bytes=0)
for n in range(3):
    crawl({seed!r} + str(n), status="failed", error={reason!r}, finished_at=now,
          error_detail="crawler instance crawl-" + "0" * 32 + "-0 exited 9")
crawl({seed!r} + "q", status="waiting_org_limit",
      waiting_reason="its org already runs 2 crawls, its maximum; " + "w" * 80)
Org.objects.filter(pk=org.pk).update(bytes_stored=1_234_567_890_123)
hook = Webhook.objects.create(url="https://hooks.example-archive-partner.org/services/" + "k" * 90,
                              secret="s" * 40, org=org)
for n, name in enumerate(("crawl.failed", "crawl.finished", "crawl.started")):
    event = CrawlEvent.record(running, name, now)
    WebhookDelivery.objects.filter(event=event).update(
        status="failed", attempts=12, last_status_code=503,
        last_error="HTTPSConnectionPool(host='hooks.example-archive-partner.org', port=443): "
                   "Read timed out. (read timeout=10) " + "e" * 150)
print(running.pk)
"""

CAPTURES = """
from django.utils import timezone
from crawls.models import Crawl, Snapshot
crawl = Crawl.objects.get(pk={crawl!r})
Snapshot.objects.filter(crawl=crawl).delete()
for n in range(3):
    Snapshot.objects.create(crawl=crawl, url={url!r}, title={title!r} + str(n), http_status=200,
                            captured_at=timezone.now(), filename="session-0.wacz", mime="text/html")
    crawl = Crawl.objects.create(org=crawl.org, seeds=crawl.seeds, config=crawl.config, status="complete")
"""


# Every cell, word and box of the page that does not fit (at most 12, each with where).
MEASURE = """
const problems = [];
const say = s => { if (problems.length < 12) problems.push(s); };
const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
  (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
const shown = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
const quote = s => JSON.stringify(s.trim().slice(0, 40));
function clipping(node, cell) {
  for (let e = node.parentElement; e && e !== cell; e = e.parentElement)
    if (getComputedStyle(e).overflowX !== 'visible') return e;
  return null;
}
for (const cell of document.querySelectorAll('td, th')) {
  if (!shown(cell)) continue;
  const box = cell.getBoundingClientRect();
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const text = walker.currentNode;
    if (!text.data.trim() || text.parentElement.closest('td, th') !== cell || !shown(text.parentElement)
        || text.parentElement.closest('meter, progress')) continue;
    const range = document.createRange();
    range.selectNodeContents(text);
    const r = range.getBoundingClientRect();
    const clip = clipping(text, cell);
    if (clip) {
      const c = clip.getBoundingClientRect();
      if (c.right > box.right + 1) say(`${name(clip)} in ${name(cell)} reaches ${Math.round(c.right - box.right)} px out of its cell`);
      else if (r.right > c.right + 1 && getComputedStyle(clip).textOverflow !== 'ellipsis')
        say(`${quote(text.data)} cut without … in ${name(clip)}`);
      else if (r.right > c.right + 1 && !clip.closest('[title], a[href]') && !clip.querySelector('[title], a[href]'))
        say(`${quote(text.data)} cut in ${name(clip)}, its whole value nowhere (no title, no link)`);
      continue;
    }
    if (r.right > box.right + 1 || r.left < box.left - 1)
      say(`${quote(text.data)} runs ${Math.round(r.right - box.right)} px out of ${name(cell)}`);
  }
  for (const e of cell.querySelectorAll('progress, meter, img, input, button, select')) {
    const r = e.getBoundingClientRect();
    if (shown(e) && (r.right > box.right + 1)) say(`${name(e)} runs ${Math.round(r.right - box.right)} px out of ${name(cell)}`);
  }
}
const cells = new Map();
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
let words = 0;
while (walker.nextNode() && words < 20000) {
  const node = walker.currentNode, parent = node.parentElement;
  if (!parent || parent.closest('script, style, select, textarea, noscript, meter, progress') || !shown(parent)) continue;
  const re = /[^\\s\\-\\u2013\\u2014]+/g;
  let m;
  while ((m = re.exec(node.data))) {
    words++;
    const range = document.createRange();
    range.setStart(node, m.index);
    range.setEnd(node, m.index + m[0].length);
    const rects = [...range.getClientRects()].filter(r => r.width > 0);
    if (!rects.length) continue;
    const tops = rects.map(r => r.top);
    if (m[0].length <= 20 && Math.max(...tops) - Math.min(...tops) > rects[0].height / 2)
      say(`${quote(m[0])} broken over lines in ${name(parent)}`);
    const cell = parent.closest('td, th, dd, li, p');
    if (cell) {
      const seen = cells.get(cell) || {words: 0, lines: new Set()};
      seen.words++;
      seen.lines.add(Math.round(rects[0].top));
      cells.set(cell, seen);
    }
  }
}
for (const [cell, seen] of cells)
  if (seen.words >= 6 && seen.words / seen.lines.size < 1.5)
    say(`${quote(cell.innerText)} one word per line (${seen.words} words, ${seen.lines.size} lines) in ${name(cell)}`);
for (const e of document.body.querySelectorAll('*')) {
  const s = getComputedStyle(e);
  if (['auto', 'scroll'].includes(s.overflowX) && e.scrollWidth > e.clientWidth + 1 && !e.matches('textarea, select, input'))
    say(`${name(e)} scrolls sideways (${e.scrollWidth - e.clientWidth} px)`);
}
if (document.documentElement.scrollWidth > window.innerWidth)
  say(`the page scrolls sideways (${document.documentElement.scrollWidth - window.innerWidth} px)`);
return problems;
"""


def pages(installation) -> dict[str, str]:
    installation.manage("shell", "--no-imports", "-c", ROWS.format(
        org=LONG_ORG, seed=LONG_SEED, site=SITE, reason=REASON)).strip().splitlines()[-1]
    words = " ".join(f"archived{n} text" for n in range(300))
    title = "A page whose title is as long as the ones news sites give their articles, and then some"
    archived = archived_crawl(installation, [(LONG_SEED, title, f"<html><head><title>{title}</title></head>"
                                              f"<body><p>walrus {words}</p></body></html>", f"walrus {words}")])
    installation.manage("reindex")
    installation.manage("shell", "--no-imports", "-c", CAPTURES.format(crawl=archived, url=LONG_SEED, title=title))
    name = "Elections 2026: every candidate's site, weekly, " + "n" * 40
    installation.manage("collection", "create", name)
    collection = json.loads(installation.manage("collection", "show", name, "--json"))
    installation.manage("collection", "add", collection["name"], archived)
    # Each page, and what it must show (the measure is worth nothing on an empty page).
    return {
        "home": ("/admin/", "#room-running tbody tr:nth-child(2) .crawl-progress"),
        "crawl-list": ("/admin/crawls/crawl/", "#result_list tbody tr:nth-child(9)"),
        "search": ("/admin/search/?q=walrus", ".search-results td.snippet mark"),
        "collections": ("/admin/crawls/collection/", "#result_list tbody tr"),
        "deliveries": ("/admin/crawls/webhookdelivery/", "#result_list tbody tr:nth-child(3)"),
        "web-captures": ("/web/*/" + LONG_SEED, ".web-captures tbody tr:nth-child(3)"),
        "web-missing": ("/web/2026/" + LONG_SEED + "-never-archived", ".web-message"),
    }


def test_every_table_fits_its_cells_at_1280_px_with_the_navigation_open_and_at_390_px(
        installation, admin_url, browser, shots):
    from selenium.webdriver.common.by import By

    driver = browser
    urls = pages(installation)
    log_in(driver, admin_url, installation)
    driver.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'true');")
    found = {}
    for size, (width, height) in SIZES.items():
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        for name, (path, content) in urls.items():
            driver.get(admin_url + path)
            wait_until(lambda: driver.execute_script("return document.readyState") == "complete",
                       30, f"{name} to load")
            assert "/login/" not in driver.current_url
            shots.take(f"{name}-{size}")
            assert driver.find_elements(By.CSS_SELECTOR, content), f"{name}: no {content}"
            problems = driver.execute_script(MEASURE)
            if problems:
                found[f"{name} at {width} px"] = problems
    assert found == {}, "cells that do not fit:\n" + "\n".join(
        f"{page}:\n  " + "\n  ".join(problems) for page, problems in found.items())

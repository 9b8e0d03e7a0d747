"""Browser mode: pages loaded in Debian's Chromium, every request made by archiver.

- cdp.py: the DevTools protocol over Chromium's --remote-debugging-pipe.
- process.py: finding, starting (headless, temporary profile, a dead proxy), measuring
  and killing one Chromium.
- network.py: the requests a page makes, sent by archiver's pinned HTTP client under the
  crawl address policy, bytes kept as received.
- page.py: one page in a tab: interception, waits, behaviors, links and text from the DOM.
- frames.py: the text of the page's iframes; shots.py: its screenshots (view, thumbnail,
  fullPage), as browsertrix-crawler records them.
- engine.py: one browser per instance, `workers` tabs at once, a crashed or hung browser
  replaced and its page retried once.
- capture.py, records.py: what a page gave, and its WARC records.
"""

from archiver_crawler.browser.capture import LoadState, PageCapture, Resource
from archiver_crawler.browser.engine import BrowserEngine, BrowserUnavailable, EngineOptions
from archiver_crawler.browser.page import BEHAVIORS, LIFECYCLE, PageOptions
from archiver_crawler.browser.process import Limits, find_chromium
from archiver_crawler.browser.records import write_capture

__all__ = ["BEHAVIORS", "LIFECYCLE", "BrowserEngine", "BrowserUnavailable", "EngineOptions",
           "Limits", "LoadState", "PageCapture", "PageOptions", "Resource", "find_chromium",
           "write_capture"]

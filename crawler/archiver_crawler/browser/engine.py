"""One browser per crawler instance, pages in tabs, a dead or hung browser replaced.

`BrowserEngine.capture(url)` opens a tab, captures the page (page.py) and closes the tab;
up to `workers` pages at once share the browser. The engine restarts Chromium when

- its pipe closes (it crashed or was killed): every page in it fails with BrowserGone;
- a page overruns its hard deadline (the page-load timeout, the post-load delay, the
  behaviors and the settling of requests, plus a margin) and the browser then does not
  answer a ping within a few seconds: it is hung;
- the watchdog finds its processes using more memory (PSS) than `Limits.max_rss_mb`.

A page that was in a browser that had to be replaced is tried once more in the new one,
then failed with the reason; no page waits on a browser forever.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from archiver_crawler.browser.capture import PageCapture
from archiver_crawler.browser.cdp import BrowserGone
from archiver_crawler.browser.network import Exchanger
from archiver_crawler.browser.page import PageOptions, Tab
from archiver_crawler.browser.process import ChromiumProcess, Limits, RunAs, find_chromium, run_as
from archiver_crawler.browser.screencast import Screencast, casting
from archiver_crawler.netpolicy import AddressPolicy

logger = logging.getLogger(__name__)

PING_TIMEOUT = 5.0
WATCH_INTERVAL = 2.0


class BrowserUnavailable(RuntimeError):
    """No Chromium was found, or it would not start."""


@dataclass
class EngineOptions:
    executable: str | None = None
    workers: int = 1
    limits: Limits = field(default_factory=Limits)
    user_agent: str | None = None
    lang: str | None = None
    request_timeout: float = 30.0
    page: PageOptions = field(default_factory=PageOptions)
    hang_margin: float = 30.0  # beyond a page's own bounds, before the browser is pinged


class BrowserEngine:
    def __init__(self, policy: AddressPolicy, options: EngineOptions,
                 exchanger: Exchanger | None = None):
        self.options = options
        self.executable = find_chromium(options.executable)
        self.exchanger = exchanger or Exchanger(policy, options.request_timeout,
                                                connections=max(8, options.workers * 6))
        self.browser: ChromiumProcess | None = None
        self.restarts = 0
        self._slots = asyncio.Semaphore(options.workers)
        self._free_tabs = list(range(options.workers))  # a tab's number, for the live view
        self.screencast: Screencast | None = None  # set by the crawl: frames while watched
        self._lock = asyncio.Lock()
        self._watchdog: asyncio.Task | None = None
        self.peak_memory = 0
        self._runs_as: RunAs | None = None

    async def start(self) -> None:
        await self._ensure()
        self._watchdog = asyncio.get_running_loop().create_task(self._watch(), name="watchdog")

    async def close(self) -> None:
        if self._watchdog:
            self._watchdog.cancel()
        async with self._lock:
            if self.browser is not None:
                await self.browser.stop()
                self.browser = None
        await self.exchanger.close()

    async def _ensure(self) -> ChromiumProcess:
        """The running browser, started (again) if it is missing or dead."""
        async with self._lock:
            if self.browser is not None and not self.browser.usable():
                logger.warning("the browser is gone (%s); starting a new one",
                               self.browser.connection.close_reason or "its process exited")
                await self.browser.stop()
                self.browser = None
                self.restarts += 1
            if self.browser is None:
                if self.executable is None:
                    raise BrowserUnavailable("no Chromium found (install Debian's chromium, or "
                                             "give its path)")
                self.browser = await self._start()
            return self.browser

    async def _start(self) -> ChromiumProcess:
        """A started browser that answers, as `run_as()` says; sandboxed as an unprivileged
        user unless that fails, then (once, remembered) without the sandbox."""
        if self._runs_as is None:
            self._runs_as = run_as()
        try:
            return await self._start_as(self._runs_as)
        except BrowserUnavailable as exc:
            if not self._runs_as.sandbox:
                raise
            # Never root here (run_as() gives root no sandbox to lose): an unprivileged user
            # without user namespaces, as in archiver's container under Docker's default
            # seccomp profile, where the container itself (no capabilities, no new
            # privileges, a read-only root) is the wall.
            logger.warning("Chromium would not start sandboxed as an unprivileged user (%s); "
                           "starting it as that user without its sandbox (--no-sandbox)", exc)
            self._runs_as = replace(self._runs_as, sandbox=False)
            return await self._start_as(self._runs_as)

    async def _start_as(self, runs_as: RunAs) -> ChromiumProcess:
        o = self.options
        try:
            browser = await ChromiumProcess.start(self.executable, o.limits, o.user_agent,
                                                  o.lang, runs_as)
        except OSError as exc:
            raise BrowserUnavailable(f"Chromium would not start: {exc}") from exc
        try:
            await browser.connection.send("Browser.getVersion", timeout=PING_TIMEOUT * 4)
        except BrowserGone as exc:
            await browser.stop()
            raise BrowserUnavailable(f"Chromium would not start: {exc}") from exc
        logger.info("Chromium started, pid %d%s%s", browser.pid,
                    f", as uid {runs_as.uid}" if runs_as.uid is not None else "",
                    "" if runs_as.sandbox else ", without its sandbox")
        return browser

    async def capture(self, url: str, options: PageOptions | None = None) -> PageCapture:
        """The page at `url`; a browser lost meanwhile is replaced and the page tried once
        more. BrowserUnavailable only when no browser can be started at all."""
        options = options or self.options.page
        async with self._slots:
            slot = self._free_tabs.pop(0)
            try:
                reason = ""
                for _attempt in range(2):
                    browser = await self._ensure()
                    try:
                        return await self._capture_in(browser, url, options, slot)
                    except BrowserGone as exc:
                        reason = str(exc)
                        logger.warning("browser lost while loading %s (%s)", url, reason)
                        browser.kill()  # the next _ensure() replaces it
                return PageCapture(url=url, ts=datetime.now(UTC),
                                   error=f"the browser failed twice on this page: {reason}")
            finally:
                self._free_tabs.append(slot)

    async def _capture_in(self, browser: ChromiumProcess, url: str,
                          options: PageOptions, slot: int = 0) -> PageCapture:
        tab = Tab(browser.connection, self.exchanger, options)
        deadline = (options.page_load_timeout * 2 + options.post_load_delay
                    + options.behavior_timeout * len(options.behaviors) + options.settle_timeout
                    + self.options.hang_margin)
        try:
            async with asyncio.timeout(deadline):
                await tab.open()
                async with casting(self.screencast, tab, slot, url):
                    return await tab.capture(url)
        except TimeoutError:
            if not await self.answers(browser):
                browser.kill()  # hung: no tab of it is worth closing
                raise BrowserGone(f"the browser hung on the page ({deadline:g} s)") from None
            capture = tab.result or PageCapture(url=url, ts=datetime.now(UTC))
            capture.error = capture.error or f"the page took longer than {deadline:g} s"
            return capture
        finally:
            if browser.usable():
                try:
                    await tab.close()
                except BrowserGone:
                    browser.kill()

    async def answers(self, browser: ChromiumProcess) -> bool:
        try:
            await browser.connection.send("Browser.getVersion", timeout=PING_TIMEOUT)
            return True
        except BrowserGone:
            return False

    async def _watch(self) -> None:
        """Kill a browser over its memory bound; a dead one is replaced on the next page."""
        limit = self.options.limits.max_rss_mb * 1024 * 1024
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            browser = self.browser
            if browser is None or not browser.alive():
                continue
            used = await asyncio.to_thread(browser.memory_bytes)
            self.peak_memory = max(self.peak_memory, used)
            if used > limit:
                logger.error("the browser uses %d MiB, over its %d MiB bound: restarting it",
                             used >> 20, limit >> 20)
                browser.kill()

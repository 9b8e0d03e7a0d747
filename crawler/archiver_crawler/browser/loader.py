"""Browser mode at the crawl's page seam (page.PageLoader): a page loaded in Chromium.

The page is archived at the URL it was queued with; the browser follows redirects within
the load, and where they ended is `PageResult.final_url` (page info's `finalUrl`). Its
links are those of the live DOM after the waits and behaviors; everything the page
loaded is archived with it, each resource once per crawl (the processor claims them in
`<id>:assets`, as the HTTP mode's requisites).
"""

from __future__ import annotations

from functools import partial

from archiver_crawler.browser.engine import BrowserEngine, BrowserUnavailable, EngineOptions
from archiver_crawler.browser.page import PageOptions
from archiver_crawler.browser.process import Limits
from archiver_crawler.browser.records import write_capture
from archiver_crawler.config import BROWSER_BEHAVIORS, CrawlConfig
from archiver_crawler.errors import CrawlerError, ExitCode
from archiver_crawler.fetch import Fetched, Fetcher, FetchError, FetchRefused
from archiver_crawler.netpolicy import AddressPolicy
from archiver_crawler.page import PageResult, not_modified
from archiver_crawler.scope import normalize_url


class BrowserFailed(CrawlerError):
    """Chromium cannot be started at all: the instance ends, to be launched again."""

    exit_code = ExitCode.GENERIC_ERROR


def engine_options(config: CrawlConfig) -> EngineOptions:
    b = config.browser
    return EngineOptions(
        executable=b.chromium, workers=config.workers, limits=Limits(),
        user_agent=config.user_agent, lang=b.lang, request_timeout=config.page_load_timeout,
        page=PageOptions(
            wait_until=b.wait_until, page_load_timeout=config.page_load_timeout,
            post_load_delay=b.post_load_delay,
            behaviors=tuple(n for n in b.behaviors if n in BROWSER_BEHAVIORS),
            behavior_timeout=b.behavior_timeout, screenshots=b.screenshots))


class BrowserPageLoader:
    """One Chromium for the instance (started by `start()`), `--workers` tabs at once."""

    def __init__(self, config: CrawlConfig, policy: AddressPolicy,
                 engine: BrowserEngine | None = None, fetcher: Fetcher | None = None):
        self.engine = engine or BrowserEngine(policy, engine_options(config))
        self.fetcher = fetcher  # for a deduplicating crawl's conditional GETs of kept pages
        self.text_to_pages = "to-pages" in config.browser.text
        self.text_to_warc = bool(config.browser.text)

    async def start(self) -> None:
        try:
            await self.engine.start()
        except BrowserUnavailable as exc:
            await self.engine.close()
            raise BrowserFailed(str(exc)) from exc

    async def close(self) -> None:
        await self.engine.close()

    async def load(self, url: str) -> PageResult:
        unchanged = await self._not_modified(url)
        if unchanged is not None:
            return unchanged
        try:
            capture = await self.engine.capture(url)
        except BrowserUnavailable as exc:
            raise BrowserFailed(str(exc)) from exc
        main = capture.main
        if main is None or main.exchange is None:
            reason = (main.error if main and main.error else "") or capture.error or "no response"
            if main is not None and main.refused:
                raise FetchRefused(reason)
            raise FetchError(reason)
        documents = {id(r) for r in capture.documents()}
        loaded = tuple(dict.fromkeys(
            r.url for r in capture.resources
            if r.exchange is not None and id(r) not in documents and r.exchange.method == "GET"))
        links = [u for u in dict.fromkeys(normalize_url(link) for link in capture.links) if u]
        return PageResult(
            Fetched(main.exchange), title=capture.title, load_state=capture.load_state,
            links=links, text=capture.text if self.text_to_pages else "",
            final_url=capture.final_url, loaded=loaded,
            archive=partial(write_capture, capture=capture, text=self.text_to_warc))

    async def _not_modified(self, url: str) -> PageResult | None:
        """A page the org kept with validators is first asked for by the crawler, with them:
        Chromium cannot be handed a 304 (it has no kept body to show), but a 304 needs no
        browser at all. Any other answer is dropped and the page loads in Chromium (its
        document downloaded a second time: only a changed page's)."""
        known = self.fetcher.known if self.fetcher is not None else None
        if known is None or known.kept(url) is None:
            return None
        return not_modified(await self.fetcher.fetch(url), url, known)

"""One claimed page from its load to its outcome: archived, listed in pages.jsonl, its links
put through the scope, its requisites fetched once claimed; or failed, with the reason."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable

from redis.exceptions import RedisError

from archiver_crawler.config import CrawlConfig
from archiver_crawler.errors import CrawlerError
from archiver_crawler.fetch import Fetched, Fetcher, FetchError, FetchRefused
from archiver_crawler.frontier import Frontier
from archiver_crawler.links import extract_css
from archiver_crawler.output import Output
from archiver_crawler.page import PageLoader, PageResult
from archiver_crawler.state import CrawlState, Outcome, QueueEntry
from archiver_crawler.stop import StopReason
from archiver_crawler.warc import iso_now, warc_date

logger = logging.getLogger(__name__)


class PageProcessor:
    def __init__(self, config: CrawlConfig, state: CrawlState, loader: PageLoader,
                 fetcher: Fetcher, frontier: Frontier, output: Output,
                 request_stop: Callable[[StopReason], None]):
        self.config = config
        self.state = state
        self.loader = loader
        self.fetcher = fetcher  # for requisites
        self.frontier = frontier
        self.output = output
        self.request_stop = request_stop
        self.pages_crawled = 0
        # Told the session's size after every write (one process of several: procs.py).
        self.on_size: Callable[[int], None] | None = None
        self._asset_slots = asyncio.Semaphore(config.workers * 2)

    async def process_safely(self, entry: QueueEntry) -> Outcome:
        """`process`, with an unexpected error failing this page rather than the crawl."""
        try:
            return await self.process(entry)
        except (CrawlerError, RedisError, OSError):
            raise  # the instance's own trouble (disk, Redis): not this page's
        except Exception as exc:  # noqa: BLE001 - per-page boundary: logged, page failed
            logger.exception("internal error on %s", entry.url)
            return self.failed(entry, f"internal error: {type(exc).__name__}: {exc}"[:300])

    async def process(self, entry: QueueEntry) -> Outcome:
        """Load one page and archive it; its outcome carries the links and requisites."""
        seed = await self.frontier.seed_for(entry.seed_id)
        try:
            result = await self.loader.load(entry.url)
        except FetchError as exc:
            return self.failed(entry, str(exc))
        if result.final_url and result.final_url != entry.url:
            # A seed the browser was redirected out of its scope: the links are judged by
            # a seed at the final URL, as the HTTP mode's redirect target would be.
            seed = await self.frontier.redirected_seed(entry, seed, result.final_url)
        if result.redirect:
            links = await self.frontier.redirect_target(entry, seed, result.redirect)
        elif result.links:
            links = await self.frontier.in_scope(entry, seed, result.links)
        else:
            links = []
        fresh: set[str] = set()
        if result.loaded:
            fresh = set((await self.state.add([], 0, list(result.loaded)))[1])
        # Written only after the last await: from here to the worker holding the outcome
        # nothing can be cancelled, so an archived page always reaches a commit or the
        # journal of unrecorded outcomes, and is never fetched (and archived) twice.
        page_id = uuid.uuid4().hex
        if result.archive is not None:
            size = self.output.write_records(
                lambda warc: result.archive(warc, page_id=page_id,
                                            seen=lambda url: url not in fresh,
                                            known=self.output.known))
            self._check_size(size)
        else:
            self.write(result.fetched)
        return self.archived(entry, result, links, page_id)

    def archived(self, entry: QueueEntry, result: PageResult,
                 links: list[QueueEntry], page_id: str | None = None) -> Outcome:
        fetched = result.fetched
        page = {
            "id": page_id or uuid.uuid4().hex, "url": entry.url, "title": result.title,
            "ts": warc_date(fetched.exchange.date), "mime": fetched.mime,
            "status": fetched.status, "depth": entry.depth, "seed": entry.depth == 0,
            "loadState": result.load_state,
        }
        if result.not_modified is not None:
            page.update(mime=result.not_modified.mime, status=200, notModified=True)
        if result.text:
            page["text"] = result.text
        if result.final_url and result.final_url != entry.url:
            page["finalUrl"] = result.final_url
        # In a WACZ's pages list, a page's `filename` names the WACZ holding it (replay tools
        # open that file for the page): the WARC's name goes only to Redis.
        self.output.add_page(json.dumps(page))
        # Redis gets no text: the runner reads a kept WACZ's pages.jsonl for it, off the tick.
        record = json.dumps({**{k: v for k, v in page.items() if k != "text"},
                             "filename": self.output.warc_name})
        self.pages_crawled += 1
        return Outcome(entry.url, page=record if self.config.write_pages_to_redis else None,
                       links=tuple(links), assets=tuple(result.requisites))

    def failed(self, entry: QueueEntry, reason: str) -> Outcome:
        logger.error("page load failed: %s (%s)", entry.url, reason,
                     extra={"context": "pageStatus", "details": {"url": entry.url,
                                                                 "reason": reason}})
        return Outcome(entry.url, failed=json.dumps(
            {"url": entry.url, "seedId": entry.seed_id, "depth": entry.depth,
             "extraHops": entry.extra_hops, "reason": reason, "ts": iso_now()}))

    def write(self, fetched: Fetched) -> None:
        self._check_size(self.output.archive(fetched.exchange))

    def _check_size(self, size: int) -> None:
        if self.on_size is not None:
            self.on_size(size)
        if self.config.size_limit and size >= self.config.size_limit:
            self.request_stop(StopReason.SIZE_LIMIT)

    async def fetch_requisites(self, fresh: list[str]) -> None:
        """Fetch requisites already claimed for this instance (see CrawlState.add)."""
        if fresh:
            await asyncio.gather(*(self._fetch_requisite(url) for url in fresh))

    async def _fetch_requisite(self, url: str) -> None:
        async with self._asset_slots:
            try:
                fetched = await self.fetcher.fetch(url)
            except FetchRefused as exc:
                # Not a page, so not on `<id>:f`; an error line (`<id>:e`, the crawl's log)
                # says which request the policy stopped, and nothing of it is archived.
                logger.error("requisite refused: %s (%s)", url, exc, extra={
                    "context": "addressPolicy", "details": {"url": url, "reason": str(exc)}})
                return
            except FetchError as exc:
                logger.warning("requisite failed: %s (%s)", url, exc)
                return
        self.write(fetched)
        if fetched.mime == "text/css" and fetched.status < 400:
            _, fresh = await self.state.add([], 0, extract_css(fetched.decoded_body(), url))
            await self.fetch_requisites(fresh)

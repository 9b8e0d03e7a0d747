"""Which URLs the crawl queues: the seeds (and the extra seeds of redirected ones), each
seed's scope, the exclusions added while the crawl runs, and robots.txt."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import replace

from archiver_crawler.config import CrawlConfig
from archiver_crawler.fetch import Fetcher
from archiver_crawler.scope import Seed, normalize_url
from archiver_crawler.sitemap import queue_sitemap_pages
from archiver_crawler.state import CrawlState, QueueEntry

logger = logging.getLogger(__name__)
KNOWN_LIMIT = 500_000  # URLs in Frontier.known (about 100 bytes each)


class Frontier:
    def __init__(self, config: CrawlConfig, state: CrawlState, fetcher: Fetcher):
        self.config = config
        self.state = state
        self.fetcher = fetcher  # for robots.txt
        self.seeds: dict[int, Seed] = {
            i: Seed(i, spec.url, config, spec) for i, spec in enumerate(config.seeds)}
        self.live_excludes: list[re.Pattern] = []
        # URLs this instance knows are in the crawl's seen set (`:s`, which only grows): a
        # link found again is skipped here rather than judged, serialised and sent to Redis
        # to be found seen there. Bounded; emptied (never wrong, only slower) when full.
        self.known: set[str] = set()

    @property
    def main_page(self) -> str | None:
        return self.seeds[0].url if self.seeds else None

    async def queue_seeds(self) -> None:
        """The seeds, then the pages their sitemaps list (--sitemap)."""
        entries = [QueueEntry(url=seed.url, seed_id=seed.id, depth=0)
                   for seed in self.seeds.values()]
        await self.state.add(await self._robots_filter(entries), self.config.limit)
        await queue_sitemap_pages(self)

    async def listed(self, urls: Iterable[str]) -> tuple[list[QueueEntry], int]:
        """URLs a site lists (its sitemaps), each queued as the first seed whose scope takes it
        would queue a seed (depth 0), robots.txt applied; and how many no seed took."""
        entries, out_of_scope = [], 0
        for listed in urls:
            url = normalize_url(listed)
            seed = url and next((s for s in self.seeds.values()
                                 if s.decide(url, 0, 0, self.live_excludes)), None)
            if seed is None:
                out_of_scope += 1
                continue
            entries.append(QueueEntry(url=url, seed_id=seed.id, depth=0))
        return await self._robots_filter(entries), out_of_scope

    async def in_scope(self, entry: QueueEntry, seed: Seed,
                       links: Iterable[str]) -> list[QueueEntry]:
        """The page's links that its seed's scope (and robots.txt) let us queue."""
        depth, hops = entry.depth + 1, entry.extra_hops + 1
        entries = []
        known = self.known
        for url in links:
            if url in known:
                continue
            decision = seed.decide(url, depth, hops, self.live_excludes)
            if decision:
                entries.append(QueueEntry(url=url, seed_id=seed.id, depth=depth,
                                          extra_hops=hops if decision.out_of_scope
                                          else entry.extra_hops))
        return await self._robots_filter(entries)

    def committed(self, entries: list[QueueEntry], queued: int, limit: int) -> None:
        """After a commit of `entries`: every one is in `:s` now, unless the page limit
        turned some away (those may be queued later, if the limit is raised)."""
        if limit > 0 and queued < len(entries):
            return
        if len(self.known) + len(entries) > KNOWN_LIMIT:
            self.known.clear()
        self.known.update(e.url for e in entries)

    async def redirect_target(self, entry: QueueEntry, seed: Seed,
                              target: str) -> list[QueueEntry]:
        """A redirect's target, to queue at the same depth; a seed may leave its scope."""
        url = normalize_url(target)
        if url is None or url == entry.url:
            return []
        if entry.depth == 0 and not seed.decide(url, 0, 0, self.live_excludes):
            position = await self.state.add_extra_seed(seed.id, url)
            new_id = len(self.config.seeds) + position
            self.seeds[new_id] = self._extra_seed(new_id, seed, url)
            return [QueueEntry(url=url, seed_id=new_id, depth=0)]
        # Following a redirect is part of loading the page: no extra hop is spent on it.
        if seed.decide(url, entry.depth, entry.extra_hops, self.live_excludes):
            return await self._robots_filter([QueueEntry(
                url=url, seed_id=seed.id, depth=entry.depth, extra_hops=entry.extra_hops)])
        return []

    async def redirected_seed(self, entry: QueueEntry, seed: Seed, final_url: str) -> Seed:
        """The seed whose scope judges the links of a page the browser was redirected
        away from: a seed redirected out of its scope becomes an extra seed at the final
        URL (as `redirect_target` makes one); any other page keeps its seed."""
        url = normalize_url(final_url)
        if url is None or entry.depth != 0 or seed.decide(url, 0, 0, self.live_excludes):
            return seed
        position = await self.state.add_extra_seed(seed.id, url)
        new_id = len(self.config.seeds) + position
        self.seeds[new_id] = self._extra_seed(new_id, seed, url)
        return self.seeds[new_id]

    async def _robots_filter(self, entries: list[QueueEntry]) -> list[QueueEntry]:
        if not self.config.use_robots:
            return entries
        allowed = []
        for entry in entries:
            if await self.fetcher.allowed_by_robots(entry.url):
                allowed.append(entry)
            else:
                logger.info("robots.txt disallows %s", entry.url)
        return allowed

    def _extra_seed(self, seed_id: int, orig: Seed, url: str) -> Seed:
        spec = self.config.seeds[orig.id] if orig.id < len(self.config.seeds) else None
        spec = replace(spec, url=url) if spec else None
        return Seed(seed_id, url, self.config, spec)

    async def seed_for(self, seed_id: int) -> Seed:
        if seed_id not in self.seeds:
            for position, extra in enumerate(await self.state.get_extra_seeds()):
                new_id = len(self.config.seeds) + position
                orig = self.seeds.get(int(extra.get("origSeedId", 0)), self.seeds[0])
                self.seeds.setdefault(new_id, self._extra_seed(new_id, orig, extra["newUrl"]))
        return self.seeds.get(seed_id) or self.seeds[0]

    async def apply_message(self, message: dict) -> None:
        """An `<instance>:msg` control message: add or remove a live exclusion."""
        kind, regex = message.get("type"), message.get("regex")
        if not isinstance(regex, str):
            logger.warning("ignoring control message without a regex: %s", message)
            return
        try:
            pattern = re.compile(regex)
        except re.error:
            logger.warning("ignoring control message with an invalid regex: %s", regex)
            return
        if kind == "addExclusion":
            self.live_excludes.append(pattern)
            dropped = await self.state.drop_queued(pattern)
            logger.info("exclusion %s added; %d queued URL(s) dropped", regex, dropped)
        elif kind == "removeExclusion":
            self.live_excludes = [p for p in self.live_excludes if p.pattern != regex]
            logger.info("exclusion %s removed", regex)
        else:
            logger.warning("ignoring control message of unknown type %r", kind)

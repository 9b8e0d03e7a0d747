"""`--seedFile URL`: seeds from a file on the web (one URL a line, `#` comments skipped),
as the real crawler takes them.

Read once per crawl: the first instance (or process) to start fetches it through the crawl
address policy (sitemap.SitemapReader.get: every redirect hop judged, gzip bounded) and keeps
the list in the crawl's Redis (`<id>:seedFile`); every instance, process and relaunch then
appends that same list to its seeds, so a seed's number means the same URL everywhere.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from archiver_crawler.config import CrawlConfig, SeedSpec
from archiver_crawler.errors import ConfigError
from archiver_crawler.fetch import Fetcher
from archiver_crawler.sitemap import SitemapReader, SitemapRefused

logger = logging.getLogger(__name__)

MAX_ONLINE_SEEDS = 100_000
MAX_SEED_LENGTH = 2048


def seed_lines(data: bytes) -> list[str]:
    """The http(s) URLs of a seed file, each once; other lines but comments said, not kept."""
    urls: dict[str, None] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if (line.startswith(("http://", "https://")) and len(line) <= MAX_SEED_LENGTH
                and urlsplit(line).hostname):
            urls[line] = None
        else:
            logger.warning("seed file line %r is not an http(s) URL; skipped", line[:100])
        if len(urls) > MAX_ONLINE_SEEDS:
            raise ConfigError(f"the seed file lists more than {MAX_ONLINE_SEEDS} URLs")
    return list(urls)


async def add_online_seeds(config: CrawlConfig, redis, fetcher: Fetcher) -> None:
    """Append the seeds of `config.seed_file_url` to `config.seeds` (ConfigError, exit 4,
    when it cannot be read or lists none and no other seed is given)."""
    url = config.seed_file_url
    if not url:
        return
    key = f"{config.crawl_id}:seedFile"
    listed = await redis.lrange(key, 0, -1)
    if not listed:
        try:
            listed = seed_lines(await SitemapReader(fetcher).get(url))
        except SitemapRefused as exc:
            raise ConfigError(f"seed file {url[:200]} not read: {exc}") from None
        if listed:
            staged = f"{key}:{config.instance_id}"
            await redis.delete(staged)
            await redis.rpush(staged, *listed)
            # The first list kept wins: an instance that fetched it at the same time uses it.
            await redis.renamenx(staged, key)
            await redis.delete(staged)
            listed = await redis.lrange(key, 0, -1)
        logger.info("seed file %s: %d URL(s)", url, len(listed))
    config.seeds = [*config.seeds, *(SeedSpec(url=u) for u in listed)]
    if not config.seeds:
        raise ConfigError(f"no seeds: the seed file {url[:200]} lists no http(s) URL")

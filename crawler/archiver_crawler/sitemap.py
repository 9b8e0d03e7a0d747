"""Seeds from sitemaps (`--sitemap`, `--sitemapFromDate`): the URLs a site lists in its
sitemaps (sitemaps.org: a `urlset`, a `sitemapindex` of them, either gzipped, or plain text),
queued beside the seeds.

A sitemap is hostile input like any page: it is fetched through the crawl address policy
(every hop of a redirect too), read up to MAX_SITEMAP_BYTES once decompressed (more is
refused as a decompression bomb, not truncated), parsed by expat with any DTD refused (a
sitemap never needs one, and entity declarations are how entity-expansion and external-entity
attacks begin), and bounded in files (MAX_SITEMAPS) and URLs (MAX_SITEMAP_URLS). A refused
sitemap is said once in the crawl log with its reason; the crawl goes on without it.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urljoin, urlsplit
from xml.parsers import expat

from archiver_crawler.errors import ConfigError
from archiver_crawler.fetch import MAX_BODY, Fetcher, FetchError, client_host

logger = logging.getLogger(__name__)

MAX_SITEMAP_BYTES = 50 * 2**20  # the protocol's own bound for one file, uncompressed
MAX_SITEMAPS = 100  # files read per crawl: an index and its sitemaps
MAX_SITEMAP_URLS = 500_000  # URLs taken from all sitemaps of a crawl
# The crawl's own log (`<id>:e`, cli.RedisErrorBuffer) shows these warnings to its owner.
CRAWL_LOG = {"context": "sitemap", "crawl_log": True}
CLAIM_SECONDS = 900  # how long one instance may take to read a crawl's sitemaps
MAX_LOC = 2048  # the protocol's bound for a <loc>; longer ones are skipped
REDIRECTS = 5
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
GZIP_MAGIC = b"\x1f\x8b"
# W3C Datetime as sitemaps use it: a year, a month, a day, or a day with a time and zone.
W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?)?)?)?")


class SitemapRefused(Exception):
    """A sitemap not read; the message says why, after the sitemap's URL."""


@dataclass(frozen=True)
class Listed:
    """One <url> of a urlset, or one <sitemap> of an index."""

    url: str
    lastmod: datetime | None = None


@dataclass
class Sitemap:
    is_index: bool
    entries: list[Listed]


def w3c_datetime(text: str) -> datetime | None:
    """A W3C Datetime (`2026`, `2026-05`, `2026-05-01`, `2026-05-01T10:00:00+02:00`) as an
    aware datetime, UTC when no zone is given; None if `text` is not one."""
    match = W3C_DATETIME.fullmatch(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second, zone = match.groups()
    iso = f"{year}-{month or '01'}-{day or '01'}T{hour or '00'}:{minute or '00'}:{second or '00'}"
    if zone and zone != "Z":
        iso += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:  # 2026-13-40 and the like
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def bounded_gunzip(data: bytes, limit: int = MAX_SITEMAP_BYTES, wbits: int = 16 + zlib.MAX_WBITS) -> bytes:
    """`data` gunzipped (or inflated, by `wbits`), refused past `limit` bytes rather than truncated."""
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise SitemapRefused(f"is not valid {'gzip' if wbits > 15 else 'deflate'} ({exc})") from None
    if len(out) > limit:
        raise SitemapRefused(f"decompresses to more than {limit // 2**20} MiB (a decompression bomb?)")
    return out


def unpack(body: bytes, content_encoding: str | None) -> bytes:
    """The sitemap's XML or text: its Content-Encoding and a gzipped file (`.xml.gz`) undone."""
    if len(body) >= MAX_BODY:
        raise SitemapRefused(f"is larger than {MAX_BODY // 2**20} MiB")
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        body = bounded_gunzip(body)
    elif encoding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send it
        body = bounded_gunzip(body, wbits=zlib.MAX_WBITS if body[:1] == b"\x78" else -zlib.MAX_WBITS)
    elif encoding not in ("", "identity"):
        raise SitemapRefused(f"has a Content-Encoding ({encoding[:40]}) archiver does not read")
    if body.startswith(GZIP_MAGIC):
        body = bounded_gunzip(body)
    if len(body) > MAX_SITEMAP_BYTES:
        raise SitemapRefused(f"is larger than {MAX_SITEMAP_BYTES // 2**20} MiB")
    return body


def parse(data: bytes) -> Sitemap:
    """A urlset, a sitemapindex, or a text sitemap (one URL a line)."""
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<"):
        return _parse_text(data)
    return _XmlSitemap().parse(data)


def _parse_text(data: bytes) -> Sitemap:
    lines = data.decode("utf-8", errors="replace").splitlines()
    urls = [line.strip() for line in lines if line.strip().startswith(("http://", "https://"))]
    if len(urls) > MAX_SITEMAP_URLS:
        raise SitemapRefused(f"lists more than {MAX_SITEMAP_URLS} URLs")
    return Sitemap(is_index=False, entries=[Listed(url) for url in urls if len(url) <= MAX_LOC])


class _XmlSitemap:
    """expat with DTDs refused; collects <loc> and <lastmod> of each <url> or <sitemap>."""

    def __init__(self):
        self.root: str | None = None
        self.entries: list[Listed] = []
        self.path: list[str] = []
        self.text: list[str] = []
        self.text_size = 0
        self.loc: str | None = None
        self.lastmod: datetime | None = None

    def parse(self, data: bytes) -> Sitemap:
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.StartDoctypeDeclHandler = self._refuse_dtd
        parser.EntityDeclHandler = self._refuse_dtd
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._chars
        try:
            parser.Parse(data, True)
        except expat.ExpatError as exc:
            raise SitemapRefused(f"is not well-formed XML ({expat.errors.messages.get(exc.code, exc)}, "
                                 f"line {exc.lineno})") from None
        return Sitemap(is_index=self.root == "sitemapindex", entries=self.entries)

    def _refuse_dtd(self, *_args) -> None:
        raise SitemapRefused("has a DTD (<!DOCTYPE> or <!ENTITY>), which sitemaps never need: "
                             "refused as an XML entity attack")

    def _start(self, name: str, _attrs) -> None:
        local = name.rsplit(" ", 1)[-1]
        if self.root is None:
            if local not in ("urlset", "sitemapindex"):
                raise SitemapRefused(f"is neither a urlset nor a sitemapindex (<{local[:40]}>)")
            self.root = local
        self.path.append(local)
        self.text, self.text_size = [], 0
        if local in ("url", "sitemap"):
            self.loc, self.lastmod = None, None

    def _chars(self, data: str) -> None:
        if self.text_size <= MAX_LOC:  # no field of a sitemap is longer; the rest is not kept
            self.text.append(data)
            self.text_size += len(data)

    def _end(self, _name: str) -> None:
        local = self.path.pop()
        parent = self.path[-1] if self.path else None
        if parent in ("url", "sitemap"):
            value = "".join(self.text).strip()
            if local == "loc" and len(value) <= MAX_LOC:
                self.loc = value
            elif local == "lastmod":
                self.lastmod = w3c_datetime(value)
        elif local in ("url", "sitemap") and self.loc:
            if len(self.entries) >= MAX_SITEMAP_URLS:
                raise SitemapRefused(f"lists more than {MAX_SITEMAP_URLS} URLs")
            self.entries.append(Listed(self.loc, self.lastmod))
        self.text, self.text_size = [], 0


def sitemap_options(o: dict) -> dict:
    """The crawler's CrawlConfig fields of --sitemap (a config file's `sitemap: true` is
    "auto") and --sitemapFromDate; ConfigError when either is malformed."""
    sitemap = o.get("sitemap")
    if sitemap is True or sitemap == "":
        sitemap = "auto"
    if sitemap is not None and sitemap is not False:
        sitemap = str(sitemap)
        parts = urlsplit(sitemap)
        if sitemap != "auto" and (parts.scheme not in ("http", "https") or not parts.hostname):
            raise ConfigError(f"--sitemap {sitemap[:200]!r} is not an http(s) URL (or leave the "
                              "value out to find the sitemaps through robots.txt)")
    since = o.get("sitemapFromDate")
    since_at = None if since in (None, "") else w3c_datetime(str(since))
    if since not in (None, "") and since_at is None:
        raise ConfigError(f"--sitemapFromDate {str(since)[:60]!r} is not a date such as 2026-05-01 "
                          "or 2026-05-01T10:00:00Z")
    return {"sitemap": sitemap or None, "sitemap_from": since_at}


def robots_sitemaps(robots_txt: bytes, origin: str) -> list[str]:
    """The `Sitemap:` lines of a robots.txt (absolute, or relative to the origin)."""
    urls = []
    for line in robots_txt.decode("utf-8", errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "sitemap" and value.strip():
            urls.append(urljoin(origin + "/", value.strip()))
    return urls


class SitemapReader:
    """Reads the sitemaps of a crawl: where they are (given, or found through robots.txt),
    indexes followed, and the URLs listed there whose lastmod is not before `since`."""

    def __init__(self, fetcher: Fetcher, since: datetime | None = None):
        self.fetcher = fetcher
        self.since = since
        self.read_count = 0

    def fresh(self, entry: Listed) -> bool:
        """Whether an entry may have changed since `since`: one without a lastmod may have."""
        return self.since is None or entry.lastmod is None or entry.lastmod >= self.since

    async def find(self, given: str, seeds: list[str]) -> list[str]:
        """The sitemaps to read: `given`, or (empty or `auto`) those robots.txt names for each
        seed's origin, else its /sitemap.xml."""
        if given and given != "auto":
            return [given]
        found: list[str] = []
        for origin in dict.fromkeys(_origin(url) for url in seeds):
            listed = []
            try:
                body = await self.get(origin + "/robots.txt")
                listed = robots_sitemaps(body[:MAX_SITEMAP_BYTES], origin)
            except SitemapRefused as exc:
                logger.info("no robots.txt for %s (%s); trying /sitemap.xml", origin, exc)
            found += listed or [origin + "/sitemap.xml"]
        return list(dict.fromkeys(found))

    async def listed_urls(self, sitemaps: list[str]) -> list[str]:
        """The page URLs the sitemaps list, in order, each once, at most MAX_SITEMAP_URLS."""
        queue, seen, urls = deque(sitemaps), set(), {}
        while queue and len(urls) < MAX_SITEMAP_URLS:
            url = queue.popleft()
            if url in seen:
                continue
            seen.add(url)
            if self.read_count >= MAX_SITEMAPS:
                logger.warning("sitemap %s not read: %d sitemaps read already, the most a crawl "
                               "reads", url, MAX_SITEMAPS, extra=CRAWL_LOG)
                break
            try:
                sitemap = await self.read(url)
            except SitemapRefused as exc:
                logger.warning("sitemap %s not read: %s; the crawl goes on without it", url, exc,
                               extra=CRAWL_LOG)
                continue
            fresh = [entry.url for entry in sitemap.entries if self.fresh(entry)]
            if sitemap.is_index:
                queue.extend(fresh)
            else:
                urls.update(dict.fromkeys(fresh[:MAX_SITEMAP_URLS - len(urls)]))
            logger.info("sitemap %s: %d of %d %s taken", url, len(fresh), len(sitemap.entries),
                        "sitemaps" if sitemap.is_index else "URLs")
        return list(urls)

    async def read(self, url: str) -> Sitemap:
        self.read_count += 1
        return parse(await self.get(url))

    async def get(self, url: str) -> bytes:
        """The body of a 200 answer to `url`, unpacked; redirects followed hop by hop, each
        hop judged by the address policy (Fetcher.fetch)."""
        for _ in range(REDIRECTS + 1):
            if urlsplit(url).scheme not in ("http", "https"):
                raise SitemapRefused(f"{url[:200]} is not an http(s) URL")
            try:
                fetched = await self.fetcher.fetch(url)
            except FetchError as exc:  # FetchRefused too: the address policy's reason
                raise SitemapRefused(str(exc)) from None
            location = fetched.header("location")
            if fetched.status in REDIRECT_STATUSES and location:
                url = urljoin(url, location)
                continue
            if fetched.status != 200:
                raise SitemapRefused(f"answered HTTP {fetched.status}")
            return unpack(fetched.exchange.body, fetched.header("content-encoding"))
        raise SitemapRefused(f"redirected more than {REDIRECTS} times")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def literal_refused(fetcher: Fetcher, url: str) -> str | None:
    """Why the address policy refuses `url`'s host when it is an address; None otherwise
    (a name is judged when it is resolved, as every page's is)."""
    try:
        fetcher.check_literal(client_host(url))
    except FetchError as exc:
        return str(exc)
    return None


async def queue_sitemap_pages(frontier) -> None:
    """Queue the pages the crawl's sitemaps list (`--sitemap`) through `frontier` (its scope
    and robots.txt; untyped: frontier.py imports this module), once per crawl: an instance
    relaunched, or a second one, finds the crawl's `:sitemapDone` set and reads nothing."""
    config, state = frontier.config, frontier.state
    done = f"{config.crawl_id}:sitemapDone"
    if config.sitemap is None or await state.redis.exists(done):
        return
    # One instance of a scaled crawl reads them; its claim lapses if it dies for good, so a
    # relaunch (the same instance, or another once it lapsed) reads them again.
    claim = f"{config.crawl_id}:sitemapClaim"
    if not (await state.redis.set(claim, state.instance_id, nx=True, ex=CLAIM_SECONDS)
            or await state.redis.get(claim) == state.instance_id):
        logger.info("another instance reads the sitemaps")
        return
    reader = SitemapReader(frontier.fetcher, config.sitemap_from)
    urls = await reader.listed_urls(await reader.find(config.sitemap, [s.url for s in config.seeds]))
    allowed, refused = [], []
    for url in urls:
        why = literal_refused(frontier.fetcher, url)
        (refused if why else allowed).append(why or url)
    if refused:
        logger.warning("%d URL(s) listed in sitemaps not queued; the first was %s", len(refused),
                       refused[0], extra=CRAWL_LOG)
    entries, out_of_scope = await frontier.listed(allowed)
    queued = 0
    for start in range(0, len(entries), 1000):
        results, _ = await state.add(entries[start:start + 1000], config.limit)
        queued += results.count(0)
    await state.redis.set(done, 1)
    logger.info("sitemaps: %d URL(s) listed%s, %d queued, %d out of scope", len(urls),
                f" (lastmod from {config.sitemap_from.isoformat()})" if config.sitemap_from else "",
                queued, out_of_scope)

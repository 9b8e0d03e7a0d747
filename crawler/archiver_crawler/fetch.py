"""HTTP fetching: one shared aiohttp session, raw bodies for the WARC, robots.txt, per-host delay."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit
from urllib.robotparser import RobotFileParser

import aiohttp

from archiver_crawler.warc import Exchange

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024  # bigger bodies are truncated, as a guard against endless streams
MAX_PARSE = 8 * 1024 * 1024


class FetchError(Exception):
    """The request got no HTTP response (connection refused, timeout, protocol error)."""


@dataclass
class Fetched:
    exchange: Exchange

    @property
    def status(self) -> int:
        return self.exchange.status

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.exchange.response_headers:
            if key.lower() == name:
                return value
        return None

    @property
    def mime(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()

    def decoded_body(self) -> bytes:
        """The body with its Content-Encoding undone (what a parser wants)."""
        body = self.exchange.body[:MAX_PARSE]
        encoding = (self.header("content-encoding") or "").lower().strip()
        try:
            if encoding in ("gzip", "x-gzip"):
                return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, MAX_PARSE)
            if encoding == "deflate":
                try:
                    return zlib.decompressobj().decompress(body, MAX_PARSE)
                except zlib.error:
                    return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, MAX_PARSE)
        except zlib.error:
            logger.warning("cannot decode %s body of %s", encoding, self.exchange.url)
            return b""
        return body


class Fetcher:
    """Fetches with one aiohttp session (its connection pool is shared by all workers).

    aiohttp rather than httpx: its C HTTP parser costs about a quarter of the CPU per request,
    which is most of the crawl's time on a fast site.
    """

    def __init__(self, user_agent: str, timeout: float, workers: int, host_delay: float = 0.0):
        self.session = aiohttp.ClientSession(
            auto_decompress=False,  # the WARC keeps bodies as sent; decoded_body() undoes it
            connector=aiohttp.TCPConnector(limit=workers * 4, limit_per_host=workers * 4),
            timeout=aiohttp.ClientTimeout(total=timeout),
            headers={"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                     "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        self.user_agent = user_agent
        self.timeout = timeout
        self.host_delay = host_delay
        self._next_slot: dict[str, float] = {}
        self._robots: dict[str, RobotFileParser] = {}
        self._robots_locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        await self.session.close()

    async def _wait_turn(self, host: str) -> None:
        """Space this instance's requests to one host by at least `host_delay` seconds."""
        if not self.host_delay:
            return
        now = time.monotonic()
        slot = max(now, self._next_slot.get(host, 0.0))
        self._next_slot[host] = slot + self.host_delay
        if slot > now:
            await asyncio.sleep(slot - now)

    async def fetch(self, url: str) -> Fetched:
        parts = urlsplit(url)
        await self._wait_turn(parts.netloc)
        try:
            return await self._fetch(url)  # the session's total timeout bounds it
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}"[:300]) from exc

    async def _fetch(self, url: str) -> Fetched:
        date = datetime.now(UTC)
        async with self.session.get(url, allow_redirects=False) as response:
            chunks, size = [], 0
            async for chunk in response.content.iter_chunked(1 << 16):
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_BODY:
                    logger.warning("truncating %s at %d bytes", url, size)
                    break
            sent = response.request_info
            version = f"HTTP/{response.version.major}.{response.version.minor}"
            exchange = Exchange(
                url=url, method="GET", request_target=sent.real_url.raw_path_qs,
                request_headers=list(sent.headers.items()),
                http_version=version, status=response.status, reason=response.reason or "",
                response_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                                  for k, v in response.raw_headers],
                body=b"".join(chunks), date=date)
        return Fetched(exchange)

    async def allowed_by_robots(self, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        lock = self._robots_locks.setdefault(origin, asyncio.Lock())
        async with lock:
            if origin not in self._robots:
                self._robots[origin] = await self._load_robots(origin)
        return self._robots[origin].can_fetch(self.user_agent, url)

    async def _load_robots(self, origin: str) -> RobotFileParser:
        parser = RobotFileParser(origin + "/robots.txt")
        lines: list[str] = []
        try:
            async with self.session.get(origin + "/robots.txt", auto_decompress=True) as response:
                if response.status < 400:
                    lines = (await response.text(errors="replace")).splitlines()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            logger.info("no robots.txt for %s (%s); everything allowed", origin, type(exc).__name__)
        parser.parse(lines)
        return parser

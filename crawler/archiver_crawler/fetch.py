"""HTTP fetching: one shared httpx client, raw bodies for the WARC, robots.txt, per-host delay."""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit
from urllib.robotparser import RobotFileParser

import httpx

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
    def __init__(self, user_agent: str, timeout: float, workers: int, host_delay: float = 0.0):
        limits = httpx.Limits(max_connections=workers * 4, max_keepalive_connections=workers * 4)
        self.client = httpx.AsyncClient(
            follow_redirects=False, limits=limits, timeout=httpx.Timeout(timeout),
            headers={"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                     "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        self.user_agent = user_agent
        self.timeout = timeout
        self.host_delay = host_delay
        self._next_slot: dict[str, float] = {}
        self._robots: dict[str, RobotFileParser] = {}
        self._robots_locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        await self.client.aclose()

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
            async with asyncio.timeout(self.timeout):
                return await self._fetch(url)
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            raise FetchError(f"{type(exc).__name__}: {exc}"[:300]) from exc

    async def _fetch(self, url: str) -> Fetched:
        request = self.client.build_request("GET", url)
        date = datetime.now(UTC)
        response = await self.client.send(request, stream=True)
        try:
            chunks, size = [], 0
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size >= MAX_BODY:
                    logger.warning("truncating %s at %d bytes", url, size)
                    break
        finally:
            await response.aclose()
        target = request.url.raw_path.decode("ascii", "replace")
        http_version = response.http_version if response.http_version.startswith("HTTP/") else "HTTP/1.1"
        exchange = Exchange(
            url=url, method="GET", request_target=target,
            request_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                             for k, v in request.headers.raw],
            http_version=http_version, status=response.status_code,
            reason=response.reason_phrase,
            response_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                              for k, v in response.headers.raw],
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
        try:
            response = await self.client.get(origin + "/robots.txt", follow_redirects=True)
        except httpx.HTTPError as exc:
            logger.info("no robots.txt for %s (%s); everything allowed", origin, type(exc).__name__)
            parser.parse([])
            return parser
        if response.status_code >= 400:
            parser.parse([])
        else:
            parser.parse(response.text.splitlines())
        return parser

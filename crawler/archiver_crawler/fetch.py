"""HTTP fetching: one shared aiohttp session, raw bodies for the WARC, robots.txt, per-host delay.

Every connection goes where the crawl address policy (netpolicy.AddressPolicy) allows, and
only there: a host written as an address is judged before the request, and a name is
resolved once by `PolicyResolver`, which judges every address of the answer and hands the
connector exactly those (aiohttp connects to what its resolver returned, with the URL's
name as Host header and TLS server name). No second lookup happens between the check and
the connection, so DNS rebinding cannot move a checked name to a refused address.

The host judged before the request is the one aiohttp connects to (yarl's reading of the
URL, mapped by UTS 46: `127。0。0。5` is 127.0.0.5), and the connector judges once more
every address it opens a socket for (`policy_socket_factory`), whatever resolved it: a
spelling that the checks above read otherwise than the client still cannot connect.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.hosts import HostBudget, HostDown
from archiver_crawler.netpolicy import AddressPolicy, AddressRefused, NotAnAddress, literal_address
from archiver_crawler.warc import Exchange

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BODY = 64 * 1024 * 1024  # bigger bodies are truncated, as a guard against endless streams
MAX_PARSE = 8 * 1024 * 1024
ROBOTS_REDIRECTS = 5  # RFC 9309: follow at least five


class FetchError(Exception):
    """The request got no HTTP response (connection refused, timeout, protocol error)."""


class FetchRefused(FetchError):
    """The crawl address policy refused the request before any connection was made; the
    message is the reason ("refused by the crawl address policy: ...")."""


class PolicyResolver(AbstractResolver):
    """Resolves a name once, judges every address of the answer, and returns only an answer
    that passed whole: a name with one refused address is refused (else an attacker's DNS
    could pair a public address with 169.254.169.254 and let the connector pick)."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None):
        self.policy = policy
        self._inner = inner

    @property
    def inner(self) -> AbstractResolver:
        if self._inner is None:
            self._inner = DefaultResolver()  # needs the running loop, hence made on first use
        return self._inner

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        answers = await self.inner.resolve(host, port, family)
        for answer in answers:
            self.policy.check(host, answer["host"])  # raises AddressRefused
        return answers

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


def policy_socket_factory(policy: AddressPolicy):
    """The connector's socket factory: every socket it would connect is first judged by
    `policy` on the address it is for (AddressRefused, an OSError, fails that attempt)."""

    def open_socket(addr_info) -> socket.socket:
        family, type_, proto, _, address = addr_info
        policy.check(address[0], address[0])
        return socket.socket(family=family, type=type_, proto=proto)

    return open_socket


def policy_connector(policy: AddressPolicy, resolver: AbstractResolver | None,
                     connections: int) -> aiohttp.TCPConnector:
    """A connector that goes only where `policy` allows: names through PolicyResolver,
    every socket through policy_socket_factory."""
    return aiohttp.TCPConnector(limit=connections, limit_per_host=connections,
                                resolver=PolicyResolver(policy, resolver),
                                socket_factory=policy_socket_factory(policy))


def client_host(url: str) -> str:
    """The host aiohttp connects to for `url`: yarl's reading (UTS 46 mapped, IPv6
    compressed), or urlsplit's where yarl cannot read the URL (then aiohttp cannot send it)."""
    try:
        return yarl.URL(url).raw_host or ""
    except (ValueError, TypeError):
        return urlsplit(url).hostname or ""


def check_literal(policy: AddressPolicy, host: str) -> None:
    """Judge a host written as an address (aiohttp connects to those without asking its
    resolver), in any spelling a C library would accept; FetchRefused if refused."""
    try:
        ip = literal_address(host)
    except NotAnAddress as exc:
        raise FetchRefused(f"refused by the crawl address policy: {exc}") from None
    if ip is not None:
        try:
            # Named by its canonical form: "127.0.0.2 is ...", however the URL spelled it.
            policy.check(str(ip), str(ip))
        except AddressRefused as exc:
            raise FetchRefused(str(exc)) from None


async def read_exchange(response: aiohttp.ClientResponse, url: str, method: str,
                        date: datetime) -> Exchange:
    """The exchange of an open response: what was sent, and the response as received (the
    body as sent, truncated at MAX_BODY). Shared by the crawler's GETs and the browser's."""
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_BODY:
            logger.warning("truncating %s at %d bytes", url, size)
            break
    sent = response.request_info
    return Exchange(
        url=url, method=method, request_target=sent.real_url.raw_path_qs,
        request_headers=list(sent.headers.items()),
        http_version=f"HTTP/{response.version.major}.{response.version.minor}",
        status=response.status, reason=response.reason or "",
        response_headers=[(k.decode("latin-1"), v.decode("latin-1"))
                          for k, v in response.raw_headers],
        body=b"".join(chunks), date=date)


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
            decoded = undo_encoding(body, encoding, MAX_PARSE)
        except zlib.error:
            logger.warning("cannot decode %s body of %s", encoding, self.exchange.url)
            return b""
        return body if decoded is None else decoded


def undo_encoding(body: bytes, encoding: str, limit: int) -> bytes | None:
    """`body` with the Content-Encoding we offer (gzip, deflate) undone, at most `limit`
    bytes; None for another encoding; zlib.error for a body that does not decode."""
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, limit)
    if encoding == "deflate":
        try:
            return zlib.decompressobj().decompress(body, limit)
        except zlib.error:  # raw deflate, without the zlib header some servers leave out
            return zlib.decompressobj(-zlib.MAX_WBITS).decompress(body, limit)
    return None


def answer_of(fetched: Fetched) -> tuple[int, str | None]:
    """A response's status and Retry-After, as the host budget reads them."""
    return fetched.status, fetched.header("retry-after")


def answer_of_exchange(exchange: Exchange) -> tuple[int, str | None]:
    """The browser's requests' status and Retry-After (browser/network.py)."""
    return exchange.status, next((v for k, v in exchange.response_headers
                                  if k.lower() == "retry-after"), None)


def unanswered(exc: Exception) -> bool:
    """A request that got no response, which counts towards its host's breaker (a refused
    one was never sent)."""
    return isinstance(exc, FetchError) and not isinstance(exc, FetchRefused)


async def answered(request: Awaitable[T]) -> T:
    """The response `request` gets (the crawler's fetches and the browser's requests alike);
    FetchRefused when the address policy refused the connection (nothing was sent),
    FetchError when no HTTP response came."""
    try:
        return await request
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, AddressRefused):
            raise FetchRefused(str(exc.os_error)) from exc
        raise FetchError(f"{type(exc).__name__}: {exc}"[:300]) from exc
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        raise FetchError(f"{type(exc).__name__}: {exc}"[:300]) from exc


async def politely(budget: HostBudget | None, host: str, send: Callable[[], Awaitable[T]],
                   answer: Callable[[T], tuple[int, str | None]]) -> T:
    """`send()` within the host's share of the budget, when the crawl has one; a host its
    breaker holds down is a FetchError like any request without an answer."""
    if budget is None:
        return await send()
    try:
        return await budget.polite(host, send, answer, unanswered)
    except HostDown as exc:
        raise FetchError(str(exc)) from None


class Fetcher:
    """Fetches with one aiohttp session (its connection pool is shared by all workers).

    aiohttp rather than httpx: its C HTTP parser costs about a quarter of the CPU per request,
    which is most of the crawl's time on a fast site.
    """

    def __init__(self, user_agent: str, timeout: float, workers: int, host_delay: float = 0.0,
                 policy: AddressPolicy | None = None, resolver: AbstractResolver | None = None):
        # No policy given: the default one (nothing local), never "anything goes".
        self.policy = policy if policy is not None else AddressPolicy.for_this_host()
        connector = policy_connector(self.policy, resolver, workers * 4)
        self.session = aiohttp.ClientSession(
            auto_decompress=False,  # the WARC keeps bodies as sent; decoded_body() undoes it
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=timeout),
            headers={"User-Agent": user_agent, "Accept-Encoding": "gzip, deflate",
                     "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        self.user_agent = user_agent
        self.timeout = timeout
        self.host_delay = host_delay
        self._next_slot: dict[str, float] = {}
        self._robots: dict[str, RobotFileParser] = {}
        self._robots_locks: dict[str, asyncio.Lock] = {}
        # Every crawl's budget per host (hosts.py), set by the entry point; None: only hostDelay.
        self.budget: HostBudget | None = None
        # A deduplicating crawl's kept responses: GETs of those URLs are conditional.
        self.known: KnownPayloads | None = None

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
        """The response to one GET of `url`; FetchRefused when the address policy forbids
        it (nothing was sent), FetchError when no HTTP response came."""
        self.check_literal(client_host(url))
        host = urlsplit(url).netloc
        await self._wait_turn(host)
        # The session's total timeout bounds the request.
        return await politely(self.budget, host, lambda: answered(self._fetch(url)), answer_of)

    def check_literal(self, host: str) -> None:
        check_literal(self.policy, host)

    async def _fetch(self, url: str) -> Fetched:
        date = datetime.now(UTC)
        conditions = self.known.conditions(url) if self.known is not None else ()
        async with self.session.get(url, allow_redirects=False,
                                    headers=dict(conditions) or None) as response:
            return Fetched(await read_exchange(response, url, "GET", date))

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
            lines = await self._robots_lines(origin + "/robots.txt")
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError, FetchRefused) as exc:
            # A refused origin's pages are refused too; its robots.txt does not matter.
            logger.info("no robots.txt for %s (%s); everything allowed", origin, type(exc).__name__)
        parser.parse(lines)
        if self.budget is not None:
            self.budget.crawl_delay(urlsplit(origin).netloc, parser.crawl_delay(self.user_agent))
        return parser

    async def _robots_lines(self, url: str) -> list[str]:
        """robots.txt, following up to ROBOTS_REDIRECTS redirects hop by hop: aiohttp would
        connect to a redirect's address literal without asking the policy's resolver."""
        for _ in range(ROBOTS_REDIRECTS + 1):
            self.check_literal(client_host(url))
            async with self.session.get(url, allow_redirects=False,
                                        auto_decompress=True) as response:
                location = response.headers.get("Location")
                if response.status in (301, 302, 303, 307, 308) and location:
                    url = urljoin(url, location)
                    continue
                if response.status >= 400:
                    return []
                return (await response.text(errors="replace")).splitlines()
        return []

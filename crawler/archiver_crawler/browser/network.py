"""The browser's requests, made by archiver: address policy, exact bytes, a body Chromium reads.

Every request a page makes is paused by CDP `Fetch` and handed to `Exchanger.exchange()`,
which judges its host with the crawl address policy (a literal address before anything is
sent, a name through fetch.PolicyResolver, which resolves once and pins the connection to
the addresses it judged, and every socket once more as it is opened), sends it with the browser's own method, headers and body, and
keeps the response as received: status line, headers and the body bytes as sent (still
gzip-encoded if the server encoded it) for the WARC.

Chromium does not undo a Content-Encoding on a body given to `Fetch.fulfillRequest` (tried
on Chromium 156: a gzip body with `Content-Encoding: gzip` shows as gzip bytes), so
`for_browser()` hands it the decoded body, without Content-Encoding and with a length
that fits; the WARC keeps the encoded one. Only gzip and deflate are offered to servers.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

import aiohttp

from archiver_crawler.fetch import (
    MAX_BODY,
    FetchRefused,
    answer_of_exchange,
    answered,
    check_literal,
    client_host,
    policy_connector,
    politely,
    read_exchange,
    undo_encoding,
)
from archiver_crawler.hosts import HostBudget
from archiver_crawler.netpolicy import AddressPolicy
from archiver_crawler.warc import Exchange

logger = logging.getLogger(__name__)

# Set by the HTTP client for the connection it makes, never taken from the browser.
_HOP_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding",
                "accept-encoding", "proxy-connection", "upgrade"}
ACCEPT_ENCODING = "gzip, deflate"
# What Chromium is not given back: it would decode again or mis-frame the decoded body.
_NOT_FOR_BROWSER = {"content-encoding", "content-length", "transfer-encoding"}


@dataclass(frozen=True)
class BrowserResponse:
    """What `Fetch.fulfillRequest` is given: status, headers (decoded body's), body."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


class Exchanger:
    """One aiohttp session for all of a browser's requests, pinned by the address policy."""

    def __init__(self, policy: AddressPolicy, timeout: float, connections: int = 16,
                 resolver: aiohttp.abc.AbstractResolver | None = None):
        self.policy = policy
        connector = policy_connector(policy, resolver, connections)
        self.session = aiohttp.ClientSession(
            auto_decompress=False, connector=connector,
            cookie_jar=aiohttp.CookieJar(unsafe=True),  # Set-Cookie answers reach later requests
            timeout=aiohttp.ClientTimeout(total=timeout),
            skip_auto_headers=("User-Agent", "Accept"))  # the browser's own, when it sent them
        self.budget: HostBudget | None = None  # every crawl's budget per host (hosts.py)

    async def close(self) -> None:
        await self.session.close()

    def check_literal(self, url: str) -> None:
        """FetchRefused for a URL whose host is an address the policy refuses."""
        check_literal(self.policy, client_host(url))

    async def exchange(self, method: str, url: str, headers: dict[str, str],
                       body: bytes | None = None) -> Exchange:
        """Send one request as the browser asked; FetchRefused (nothing sent) or FetchError."""
        if urlsplit(url).scheme not in ("http", "https"):
            raise FetchRefused(f"refused: {urlsplit(url).scheme}: is not fetched over the network")
        self.check_literal(url)
        sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
        sent["Accept-Encoding"] = ACCEPT_ENCODING
        return await politely(self.budget, urlsplit(url).netloc,
                              lambda: answered(self._send(method, url, sent, body)), answer_of_exchange)

    async def _send(self, method: str, url: str, headers: dict[str, str],
                    body: bytes | None) -> Exchange:
        date = datetime.now(UTC)
        async with self.session.request(method, url, headers=headers, data=body,
                                        allow_redirects=False) as response:
            return await read_exchange(response, url, method, date)


def for_browser(exchange: Exchange) -> BrowserResponse:
    """The response as Chromium must be given it: the body decoded, headers to match."""
    encoding = next((v.strip().lower() for k, v in exchange.response_headers
                     if k.lower() == "content-encoding"), "")
    body = decode_body(exchange.body, encoding)
    if body is None:  # an encoding we did not offer (br, zstd): the browser gets it as is
        return BrowserResponse(exchange.status, exchange.reason,
                               [(k, v) for k, v in exchange.response_headers
                                if k.lower() != "transfer-encoding"], exchange.body)
    headers = [(k, v) for k, v in exchange.response_headers if k.lower() not in _NOT_FOR_BROWSER]
    headers.append(("Content-Length", str(len(body))))
    return BrowserResponse(exchange.status, exchange.reason, headers, body)


def decode_body(body: bytes, encoding: str) -> bytes | None:
    """`body` with its Content-Encoding undone; None for one we cannot undo. A body that
    does not decode is handed over as it is (what a browser shows of a broken one)."""
    try:
        return undo_encoding(body, encoding, MAX_BODY)
    except zlib.error:
        logger.warning("cannot decode a %s body; the browser gets it undecoded", encoding)
        return body

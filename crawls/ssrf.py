"""Which webhook URLs archiver may call, and a connection that goes only where it checked.

A webhook URL is checked in two steps. `parse_webhook_url` looks at the text alone: http(s)
only, no credentials, a well-formed host, IPv4 written in any of the forms C libraries
accept (`2130706433`, `0x7f.1`, `017700000001`) turned into the address it really means.
`check_url` then applies the settings and resolves the host ONCE: every address must be
globally routable unicast, unless the exact `host:port` is in ARCHIVER_WEBHOOK_ALLOW_HOSTS
(a named receiver for development and tests, allowed over plain http too). The result, a
`Destination`, carries the validated addresses, and `PinnedTransport` connects to them
with the original Host header and TLS server name, so DNS cannot change the answer
between the check and the connection. Redirects are never followed.

Error messages and logs name only `host:port`: a URL's path and query may hold a token.
The policy half of this module is pure (no Django), so the admin and the `webhook`
command refuse a bad URL at the door with the same rules the runner applies at delivery.
The address classes and numeric IPv4 spellings are archiver_crawler.netpolicy's, the rules
the crawler applies to every fetch: one module, so the two can never disagree.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from archiver_crawler import netpolicy
from archiver_crawler.netpolicy import IPAddress, address_problem

from archiver import conf
from archiver.errors import ConfigError, WebhookRefused

Resolver = Callable[[str, int], list[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}
ALLOW_HOSTS = "ARCHIVER_WEBHOOK_ALLOW_HOSTS"
ALLOW_DOMAINS = "ARCHIVER_WEBHOOK_ALLOW_DOMAINS"

@dataclass(frozen=True)
class WebhookURL:
    """A URL that passed the text-only checks. `ip` is set when the host is a literal."""

    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent on the request line
    ip: IPAddress | None = None

    @property
    def where(self) -> str:
        """`host:port`, the only part of a URL that logs and errors may show."""
        return where(self.host, self.port)


@dataclass(frozen=True)
class Destination:
    """A checked URL and the addresses it may be connected to, in resolver order."""

    url: WebhookURL
    addresses: tuple[str, ...]
    allowed_host: bool = False  # named in ARCHIVER_WEBHOOK_ALLOW_HOSTS

    @property
    def where(self) -> str:
        return self.url.where


class ResolutionFailed(OSError):
    """The host name did not resolve; may succeed later (DNS is down, record not yet there)."""


class DeadlineExceeded(TimeoutError):
    """The whole request (connect, TLS, request, reply) took longer than its deadline."""


def where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- the text of the URL -------------------------------------------------------------------


def parse_webhook_url(url: str) -> WebhookURL:
    """Check what can be checked without the network; WebhookRefused says what is wrong."""
    if not isinstance(url, str) or not url.strip():
        raise WebhookRefused("the webhook URL is empty")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise WebhookRefused("the webhook URL contains spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise WebhookRefused("the webhook URL is not a valid URL (bad host or port)") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise WebhookRefused("the webhook URL must start with https:// (or http:// for an allowed host)")
    if "@" in parts.netloc:
        raise WebhookRefused("credentials in the webhook URL are not allowed; use the secret")
    if not parts.hostname:
        raise WebhookRefused("the webhook URL has no host")
    host, ip = _parse_host(parts.hostname)
    port = port if port is not None else DEFAULT_PORTS[scheme]
    if port == 0:
        raise WebhookRefused(f"port 0 is not a valid port ({where(host, port)})")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return WebhookURL(scheme=scheme, host=host, port=port, target=target, ip=ip)


def _parse_host(raw: str) -> tuple[str, IPAddress | None]:
    """The normalised host, and its address when it is an IP literal in any spelling."""
    if ":" in raw:
        try:
            ip = ipaddress.IPv6Address(raw)
        except ValueError:
            raise WebhookRefused("the webhook URL's host is not a valid IPv6 address") from None
        return str(ip), ip
    host = raw.rstrip(".") if raw != "." else raw
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise WebhookRefused("the webhook URL's host is not a valid domain name") from None
    ip = parse_ipv4(host)
    if ip is not None:
        return str(ip), ip
    labels = host.split(".")
    if not all(labels) or not all(label.replace("-", "").replace("_", "").isalnum() for label in labels):
        raise WebhookRefused("the webhook URL's host is not a valid domain name")
    return host, None


def parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any form inet_aton() accepts, or None if `host` is a name (the
    crawl address policy's reading, netpolicy.parse_ipv4); no valid address is refused."""
    try:
        return netpolicy.parse_ipv4(host)
    except netpolicy.NotAnAddress:
        raise WebhookRefused(f"the webhook URL's host {host!r} is not a valid IPv4 address") from None


# --- settings -----------------------------------------------------------------------------


def allowed_hosts(entries: Iterable[str]) -> frozenset[tuple[str, int]]:
    """ARCHIVER_WEBHOOK_ALLOW_HOSTS as (host, port) pairs; a malformed entry is a ConfigError."""
    pairs = set()
    for entry in entries:
        host, sep, port = entry.strip().rpartition(":")
        host = host.strip("[]").lower()
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{ALLOW_HOSTS}: {entry!r} is not host:port (e.g. 127.0.0.1:8765)")
        try:
            host, _ = _parse_host(host)
        except WebhookRefused:
            raise ConfigError(f"{ALLOW_HOSTS}: {entry!r} does not name a valid host") from None
        pairs.add((host, int(port)))
    return frozenset(pairs)


def domain_allowed(host: str, domains: Iterable[str]) -> bool:
    """Whether `host` is one of `domains` or a subdomain of one."""
    return any(host == d or host.endswith("." + d) for d in (d.strip(".").lower() for d in domains) if d)


# --- the check ----------------------------------------------------------------------------


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host`, in its order, without repeats."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"cannot resolve {where(host, port)}: {exc}") from None
    return list(dict.fromkeys(info[4][0] for info in infos))


def check_url(url: str, settings: conf.Settings | None = None,
              resolver: Resolver | None = None) -> Destination:
    """The destination `url` may be delivered to, or WebhookRefused saying why not.

    ResolutionFailed (an OSError) means the name did not resolve right now.
    """
    settings = settings or conf.get()
    resolver = resolver or system_resolver
    parsed = parse_webhook_url(url)
    if (parsed.host, parsed.port) in allowed_hosts(settings.webhook_allow_hosts):
        return Destination(parsed, _resolve(parsed, resolver), allowed_host=True)
    if parsed.ip is not None:
        _refuse_address(parsed, parsed.ip)
    if parsed.scheme != "https":
        raise WebhookRefused(
            f"{parsed.where}: only https:// webhooks are allowed; plain http needs "
            f"{ALLOW_HOSTS} to name {parsed.where}"
        )
    if settings.webhook_allow_domains and not domain_allowed(parsed.host, settings.webhook_allow_domains):
        raise WebhookRefused(f"{parsed.where}: the host is not in {ALLOW_DOMAINS}")
    addresses = _resolve(parsed, resolver)
    for address in addresses:
        _refuse_address(parsed, ipaddress.ip_address(address))
    return Destination(parsed, addresses)


def _resolve(parsed: WebhookURL, resolver: Resolver) -> tuple[str, ...]:
    if parsed.ip is not None:
        return (str(parsed.ip),)
    addresses = tuple(resolver(parsed.host, parsed.port))
    if not addresses:
        raise ResolutionFailed(f"cannot resolve {parsed.where}: no address")
    for address in addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ResolutionFailed(f"cannot resolve {parsed.where}: bad answer {address!r}") from None
    return addresses


def _refuse_address(parsed: WebhookURL, ip: IPAddress) -> None:
    problem = address_problem(ip)
    if problem:
        shown = "" if str(ip) == parsed.host else f" resolves to {ip}, which"
        raise WebhookRefused(
            f"{parsed.where}{shown} is {problem}; only globally routable addresses may "
            f"receive webhooks (a local receiver needs {ALLOW_HOSTS}={parsed.where})"
        )


# --- the pinned connection ----------------------------------------------------------------


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names


class PinnedTransport:
    """POSTs to a Destination's validated addresses, never to what DNS says now.

    TLS is wrapped around the socket with the URL's host as server name, so SNI and
    certificate verification are those of the name that was checked. http.client
    never follows redirects; the caller treats a 3xx as it likes.

    `timeout` bounds each connect and read; `deadline` (seconds) the whole request: when it
    passes, a timer shuts the socket down, whatever the receiver trickles, and the request
    raises DeadlineExceeded.
    """

    max_body = 64 * 1024

    def __init__(self, ssl_context: ssl.SSLContext | None = None):
        self._ssl_context = ssl_context

    @property
    def ssl_context(self) -> ssl.SSLContext:
        # Made on first use: loading the system's CA certificates is not free, and a
        # deliverer that only ever finds nothing due should not pay for it.
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    def post(self, destination: Destination, body: bytes, headers: dict[str, str],
             timeout: float, deadline: float | None = None) -> Response:
        last_error: OSError | None = None
        ends = time.monotonic() + (deadline if deadline is not None else float("inf"))
        for address in destination.addresses:
            left = ends - time.monotonic()
            if left <= 0:
                raise DeadlineExceeded(f"no answer within {deadline:g}s")
            connection = self._connection(destination, address, min(timeout, left))
            cut = threading.Timer(left, connection.cut) if deadline is not None else None
            try:
                if cut is not None:
                    cut.start()
                return self._exchange(connection, destination, body, headers)
            except ConnectionRefusedError as exc:
                # Nothing was sent: the next validated address may answer.
                last_error = exc
            except (OSError, http.client.HTTPException) as exc:
                # On a busy machine a socket's own timeout (never longer than what was left)
                # may fire before the cutting timer's thread runs: past the deadline, it is it.
                if connection.was_cut or (isinstance(exc, TimeoutError) and time.monotonic() >= ends):
                    raise DeadlineExceeded(f"no answer within {deadline:g}s") from exc
                raise
            finally:
                if cut is not None:
                    cut.cancel()
                connection.close()
            if connection.was_cut:
                raise DeadlineExceeded(f"no answer within {deadline:g}s")
        raise last_error or ConnectionError(f"no address to connect to for {destination.where}")

    def _exchange(self, connection, destination: Destination, body: bytes,
                  headers: dict[str, str]) -> Response:
        connection.request("POST", destination.url.target, body=body, headers=headers)
        reply = connection.getresponse()
        reply.read(self.max_body)  # drained so the receiver sees a clean close
        if connection.was_cut:
            raise DeadlineExceeded("cut at the deadline")
        return Response(reply.status, {k.lower(): v for k, v in reply.getheaders()})

    def _connection(self, destination: Destination, address: str, timeout: float):
        url = destination.url
        if url.scheme == "https":
            return _PinnedHTTPS(url.host, url.port, address, timeout, self.ssl_context)
        return _PinnedHTTP(url.host, url.port, address, timeout)


class _Cuttable:
    """A connection whose TCP socket another thread can shut down (at the deadline): the
    blocked connect, TLS handshake or read then returns at once."""

    raw: socket.socket | None = None
    was_cut: bool = False

    def open_raw(self) -> socket.socket:
        self.raw = socket.create_connection((self.address, self.port), self.timeout)
        self.raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.was_cut:  # the deadline passed while it connected
            self.raw.close()
            raise DeadlineExceeded("cut at the deadline")
        return self.raw

    def cut(self) -> None:
        self.was_cut = True
        if self.raw is not None:
            with contextlib.suppress(OSError):
                self.raw.shutdown(socket.SHUT_RDWR)


class _PinnedHTTP(_Cuttable, http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = self.open_raw()


class _PinnedHTTPS(_Cuttable, http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext):
        super().__init__(host, port, timeout=timeout, context=context)
        self.address = address

    def connect(self) -> None:
        self.sock = self._context.wrap_socket(self.open_raw(), server_hostname=self.host)

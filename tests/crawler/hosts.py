"""Helpers for the crawl address policy's tests: small HTTP servers on a chosen loopback
address, a hook that sees every TCP connection this process starts, and a fake resolver.

Traffic only ever goes to loopback. The connection hook refuses (without connecting) any
address but 127.0.0.1, so even a broken policy cannot make a test send a packet to
169.254.169.254 or the LAN; it records the attempt, and the tests assert there was none.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiohttp.abc import AbstractResolver

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00"
       b"\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N"
       b"\x00\x00\x00\x00IEND\xaeB`\x82")


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Served:
    host: str
    port: int
    hits: list[str] = field(default_factory=list)  # request paths, in order

    def url(self, path: str = "/") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"


@contextmanager
def serve(routes: dict[str, Route], host: str = "127.0.0.1") -> Iterator[Served]:
    """Serve `routes` on `host` (a loopback address) and a free port until exit."""

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

    server = Server((host, 0), None)
    served = Served(host, server.server_address[1])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            served.hits.append(self.path)
            route = routes.get(self.path.split("?", 1)[0]) or Route(404, b"not found",
                                                                     "text/plain")
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            self.send_header("Content-Length", str(len(route.body)))
            for key, value in route.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(route.body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base's signature
            return

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, name=f"serve-{host}", daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def page(title: str, body: str) -> Route:
    return Route(body=f"<!doctype html><html><head><title>{title}</title></head>"
                      f"<body>{body}</body></html>".encode())


def watch_connections(monkeypatch) -> list[tuple[str, int]]:
    """Every address an asyncio socket of this process connects to, from now on (Redis
    included). Anything but 127.0.0.1 is refused here, before the kernel sees it."""
    seen: list[tuple[str, int]] = []
    original = asyncio.selector_events.BaseSelectorEventLoop.sock_connect

    async def sock_connect(loop, sock, address):
        seen.append((address[0], address[1]))
        if address[0] != "127.0.0.1":
            raise ConnectionRefusedError(f"test hook: no connection to {address[0]}")
        return await original(loop, sock, address)

    monkeypatch.setattr(asyncio.selector_events.BaseSelectorEventLoop, "sock_connect",
                        sock_connect)
    return seen


class FakeResolver(AbstractResolver):
    """Answers from a table: name -> list of answers, one per lookup (the last repeats), so a
    test can play a DNS server that changes its answer between two lookups."""

    def __init__(self, answers: dict[str, list[list[str]]]):
        self.answers = answers
        self.lookups: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET):
        self.lookups.append(host)
        rounds = self.answers[host]
        addresses = rounds[min(self.lookups.count(host), len(rounds)) - 1]
        return [{"hostname": host, "host": address, "port": port,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                 "proto": 0, "flags": 0} for address in addresses]

    async def close(self) -> None:
        return None


def warc_targets(directory: Path) -> list[str]:
    """WARC-Target-URI of every record in the WARCs under `directory` (a collection's
    archive/ folder) or in a WACZ file."""
    from warcio.archiveiterator import ArchiveIterator

    targets: list[str] = []
    if directory.is_file():
        with zipfile.ZipFile(directory) as wacz:
            for name in wacz.namelist():
                if name.startswith("archive/") and ".warc" in name:
                    with wacz.open(name) as stream:
                        targets += _targets(ArchiveIterator(stream))
        return targets
    for path in sorted(directory.glob("*.warc.gz")):
        with path.open("rb") as stream:
            targets += _targets(ArchiveIterator(stream))
    return targets


def _targets(records) -> list[str]:
    return [record.rec_headers.get_header("WARC-Target-URI") for record in records
            if record.rec_type in ("request", "response")]


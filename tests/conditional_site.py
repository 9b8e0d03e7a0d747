"""A site on 127.0.0.1 that honours conditional requests (RFC 9110 13.1), for the tests and
bench of conditional recrawls.

    with serve_conditional(pages=30) as site:    # /cond/ links to p1.html ... p30.html
        crawl(site.url)
        site.conditional["/cond/p1.html"]        # GETs of that path sent with a validator
        site.not_modified["/cond/p1.html"]       # of which were answered 304

Every resource has a strong ETag (the body's digest) and a fixed Last-Modified; a GET
whose If-None-Match names the ETag (or, without one, whose If-Modified-Since is not older
than Last-Modified) gets a 304 with the validators and no body. `change(path, now)` gives a
page a new body (new ETag, Last-Modified `now`). `routes=` serves other resources instead
(path -> body and content type; bench/conditional.py), `bytes_sent` counts everything
written to clients.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEPT_SINCE = 1_700_000_000  # the Last-Modified of every unchanged resource
FILLER = "<p>" + "The tide comes in and the tide goes out, as it always has. " * 20 + "</p>"


def page_body(title: str, links: list[str]) -> bytes:
    anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return (f'<!doctype html><html><head><title>{title}</title>'
            f'<link rel="stylesheet" href="/cond/style.css"></head>'
            f"<body><h1>{title}</h1>{anchors}{FILLER}</body></html>").encode()


class ConditionalSite:
    def __init__(self, port: int, pages: int, routes: dict[str, tuple[bytes, str]] | None = None,
                 seed: str = "/cond/"):
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + seed
        names = [f"p{n}.html" for n in range(1, pages + 1)]
        self.routes: dict[str, tuple[bytes, str, int]] = {
            "/cond/": (page_body("Index", names), "text/html", KEPT_SINCE),
            "/cond/style.css": (b"body { color: #223; }\n" * 40, "text/css", KEPT_SINCE)}
        for n, name in enumerate(names, 1):
            self.routes["/cond/" + name] = (page_body(f"Page {n}", names[n % pages:][:3]),
                                            "text/html", KEPT_SINCE)
        if routes is not None:
            self.routes = {path: (body, mime, KEPT_SINCE) for path, (body, mime) in routes.items()}
        self.lock = threading.Lock()
        self.gets: Counter[str] = Counter()
        self.conditional: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()
        self.bytes_sent = 0  # everything written to clients: status lines, headers, bodies

    @property
    def pages(self) -> list[str]:
        return [path for path, (_, mime, _) in self.routes.items() if mime == "text/html"]

    def change(self, path: str, now: int) -> None:
        body, mime, _ = self.routes[path]
        self.routes[path] = (body.replace(b"</h1>", b" (changed)</h1>"), mime, now)

    def reset_counts(self) -> None:
        with self.lock:
            self.gets.clear()
            self.conditional.clear()
            self.not_modified.clear()
            self.bytes_sent = 0

    def answer(self, path: str, headers) -> tuple[int, list[tuple[str, str]], bytes]:
        if path not in self.routes:
            return 404, [("Content-Type", "text/plain")], b"not found"
        body, mime, modified = self.routes[path]
        etag = '"' + hashlib.sha1(body).hexdigest()[:20] + '"'
        validators = [("ETag", etag), ("Last-Modified", formatdate(modified, usegmt=True))]
        if_none, if_since = headers.get("If-None-Match"), headers.get("If-Modified-Since")
        fresh = (etag in [t.strip() for t in if_none.split(",")]) if if_none else (
            if_since is not None and _not_older(if_since, modified))
        with self.lock:
            self.gets[path] += 1
            self.conditional[path] += bool(if_none or if_since)
            self.not_modified[path] += fresh
        if fresh:
            return 304, validators, b""
        return 200, [("Content-Type", mime), *validators], body


def _not_older(value: str, modified: int) -> bool:
    try:
        return parsedate_to_datetime(value).timestamp() >= modified
    except (TypeError, ValueError):
        return False


class CountingWriter:
    """A handler's output, counted into `owner.bytes_sent` (under `owner.lock`)."""

    def __init__(self, inner, owner):
        self.inner, self.owner = inner, owner

    def write(self, data) -> int:
        with self.owner.lock:
            self.owner.bytes_sent += len(data)
        return self.inner.write(data)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)  # flush, closed, ... as the handler's own


def _handler(site: ConditionalSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def setup(self) -> None:
            super().setup()
            self.wfile = CountingWriter(self.wfile, site)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            status, headers, body = site.answer(self.path.split("?", 1)[0], self.headers)
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            if status != 304:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature of the base
            return

    return Handler


@contextmanager
def serve_conditional(pages: int = 30, routes: dict[str, tuple[bytes, str]] | None = None,
                      seed: str = "/cond/") -> Iterator[ConditionalSite]:
    """The generated /cond/ site of `pages` pages, or the given `routes` (path -> body and
    content type) with `seed` the crawl's start."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)
    server.daemon_threads = True
    site = ConditionalSite(server.server_address[1], pages, routes, seed)
    server.RequestHandlerClass = _handler(site)
    thread = threading.Thread(target=server.serve_forever, name="conditional-site", daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

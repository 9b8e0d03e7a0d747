"""A generated web site on 127.0.0.1 for crawler tests and the benchmark.

    with serve_site() as site:            # the small fixed site below
        crawl(site.url)                   # seed: http://127.0.0.1:<port>/site/
        assert pages == site.expected_pages("prefix", depth=-1)
        site.requests["/site/a.html"]     # how often the server answered that path

    with serve_site(pages=2000) as site:  # plus /gen/: 2,000 linked pages (seed site.url)

`Site` attributes: `url` (the seed), `root` (the origin, no trailing slash), `requests`
(a Counter of paths served, thread-safe to read), `agents` (a Counter of User-Agent headers),
`external_url` (a localhost URL on a port where nothing listens: "external" and never
reachable), `requisites` (URLs of the fixed site's images, CSS, JS and icons),
`expected_pages(scope, depth=-1, robots=False)` (page URLs a crawl should record, for scope
"page", "prefix" or "host"), `reset_counts()`, and `hold()`/`release()`: while held, requests
wait (up to 30 s) before being answered, so a test can line crawlers up without timing.
`serve_site(latency=S)` delays every response by S seconds (a remote server's round trip).

The fixed site (depth from /site/):
  0 /site/            links to everything at depth 1, plus /other/page.html and external_url
  1 a.html b.html(gzip) slow.html doc.pdf missing.html(404) error.html(500) private/secret.html
    moved(301 -> target.html) temp(302 -> c.html) target.html c.html
  2 a1.html b1.html    3 a2.html (links /other/deep.html)
  host scope adds /other/page.html (1) and /other/deep.html (2)
robots.txt disallows /site/private/. Requisites live under /static/ (style.css pulls bg.png).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.ports import refused_port

FILLER = ("<p>" + "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 12 + "</p>\n")

# path -> (depth, scope it first belongs to). Redirect sources are pages too (status 301/302).
FIXED_PAGES = {
    "/site/": (0, "page"),
    "/site/a.html": (1, "prefix"), "/site/b.html": (1, "prefix"),
    "/site/slow.html": (1, "prefix"), "/site/doc.pdf": (1, "prefix"),
    "/site/missing.html": (1, "prefix"), "/site/error.html": (1, "prefix"),
    "/site/private/secret.html": (1, "prefix"),
    "/site/moved": (1, "prefix"), "/site/target.html": (1, "prefix"),
    "/site/temp": (1, "prefix"), "/site/c.html": (1, "prefix"),
    "/site/a1.html": (2, "prefix"), "/site/b1.html": (2, "prefix"),
    "/site/a2.html": (3, "prefix"),
    "/other/page.html": (1, "host"), "/other/deep.html": (2, "host"),
}
ROBOTS_DISALLOWED = {"/site/private/secret.html"}
REQUISITES = ("/static/style.css", "/static/app.js", "/static/logo.png", "/static/logo-2x.png",
              "/static/favicon.ico", "/static/bg.png")
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00"
       b"\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N"
       b"\x00\x00\x00\x00IEND\xaeB`\x82")
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def html(title: str, links: list[str], head: str = "") -> bytes:
    anchors = "\n".join(f'<a href="{href}">{href}</a>' for href in links)
    return (f"<!doctype html><html><head><title>{title}</title>{head}</head>"
            f"<body><h1>{title}</h1>{FILLER}{anchors}</body></html>").encode()


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    gzip: bool = False


def fixed_site(external_url: str, slow_delay: float) -> dict[str, Response]:
    head = ('<link rel="stylesheet" href="/static/style.css"><script src="/static/app.js"></script>'
            '<link rel="icon" href="/static/favicon.ico">')
    index_links = ["a.html", "b.html", "a.html#section", "slow.html", "doc.pdf", "missing.html",
                   "error.html", "private/secret.html", "moved", "temp", "/other/page.html",
                   external_url, "mailto:someone@example.invalid", "javascript:void(0)", "#top"]
    index = html("Index", index_links, head).replace(
        b"</body>", b'<img src="/static/logo.png" srcset="/static/logo.png 1x, '
                    b'/static/logo-2x.png 2x"></body>')
    return {
        "/robots.txt": Response(body=b"User-agent: *\nDisallow: /site/private/\n",
                                content_type="text/plain"),
        "/site/": Response(body=index),
        "/site/a.html": Response(body=html("A", ["a1.html", "/site/", "b.html"], head)),
        "/site/b.html": Response(body=html("B", ["b1.html", "/other/page.html"]), gzip=True),
        "/site/a1.html": Response(body=html("A1", ["a2.html"])),
        "/site/a2.html": Response(body=html("A2", ["/other/deep.html"])),
        "/site/b1.html": Response(body=html("B1", [])),
        "/site/c.html": Response(body=html("C", [])),
        "/site/target.html": Response(body=html("Target", [])),
        "/site/slow.html": Response(body=html("Slow", []), delay=slow_delay),
        "/site/private/secret.html": Response(body=html("Secret", [])),
        "/site/doc.pdf": Response(body=PDF, content_type="application/pdf"),
        "/site/missing.html": Response(status=404, body=html("Not Found", ["/site/"])),
        "/site/error.html": Response(status=500, body=html("Server Error", [])),
        "/site/moved": Response(status=301, headers={"Location": "/site/target.html"}),
        "/site/temp": Response(status=302, headers={"Location": "c.html"}),
        "/other/page.html": Response(body=html("Other", ["/other/deep.html", "/site/b1.html"])),
        "/other/deep.html": Response(body=html("Deep", [])),
        "/static/style.css": Response(body=b"body { background: url('bg.png'); }",
                                      content_type="text/css"),
        "/static/app.js": Response(body=b"console.log('hi');",
                                   content_type="application/javascript"),
        "/static/logo.png": Response(body=PNG, content_type="image/png"),
        "/static/logo-2x.png": Response(body=PNG, content_type="image/png"),
        "/static/favicon.ico": Response(body=PNG, content_type="image/png"),
        "/static/bg.png": Response(body=PNG, content_type="image/png"),
    }


def generated_site(pages: int, fanout: int = 10) -> dict[str, Response]:
    """/gen/ and pages 1..N in a tree of `fanout`, each linking home and to a neighbour."""
    head = '<link rel="stylesheet" href="/gen/style.css"><img src="/gen/logo.png">'
    site = {"/gen/style.css": Response(body=b"h1 { color: #333 }", content_type="text/css"),
            "/gen/logo.png": Response(body=PNG, content_type="image/png")}
    for i in range(pages + 1):
        children = [f"/gen/p{c}.html" for c in range(i * fanout + 1, i * fanout + fanout + 1)
                    if c <= pages]
        neighbour = [f"/gen/p{i + 1}.html"] if i + 1 <= pages else []
        path = "/gen/" if i == 0 else f"/gen/p{i}.html"
        site[path] = Response(body=html(f"Page {i}", children + neighbour + ["/gen/"], head))
    return site


class Site:
    def __init__(self, port: int, external_url: str, routes: dict[str, Response], seed: str):
        self.root = f"http://127.0.0.1:{port}"
        self.url = self.root + seed
        self.external_url = external_url
        self.routes = routes
        self.requisites = {self.root + p for p in REQUISITES}
        self.requests: Counter[str] = Counter()
        self.agents: Counter[str] = Counter()
        self.latency = 0.0
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._open.set()

    def count(self, path: str, agent: str) -> None:
        with self._lock:
            self.requests[path] += 1
            self.agents[agent] += 1

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()
            self.agents.clear()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def wait_until_open(self) -> None:
        self._open.wait(timeout=30)

    def expected_pages(self, scope: str = "prefix", depth: int = -1,
                       robots: bool = False) -> set[str]:
        if self.url.endswith("/gen/"):
            return {self.root + p for p, r in self.routes.items()
                    if p.startswith("/gen/") and r.content_type.startswith("text/html")}
        allowed = {"page": {"page"}, "prefix": {"page", "prefix"},
                   "host": {"page", "prefix", "host"}}[scope]
        return {self.root + path for path, (d, s) in FIXED_PAGES.items()
                if s in allowed and (depth < 0 or d <= depth)
                and not (robots and path in ROBOTS_DISALLOWED)}


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: avoid delayed-ACK stalls

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            site.count(path, self.headers.get("User-Agent", ""))
            site.wait_until_open()
            response = site.routes.get(path) or Response(status=404, body=b"not found",
                                                         content_type="text/plain")
            if response.delay or site.latency:
                time.sleep(response.delay + site.latency)
            body = response.body
            use_gzip = response.gzip and "gzip" in self.headers.get("Accept-Encoding", "")
            if use_gzip:
                body = gzip.compress(body)
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(body)))
            if use_gzip:
                self.send_header("Content-Encoding", "gzip")
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature of the base
            return

    return Handler


@contextmanager
def serve_site(pages: int | None = None, slow_delay: float = 0.3,
               latency: float = 0.0, extra: dict[str, Response] | None = None) -> Iterator[Site]:
    """Serve the fixed site (or, with `pages`, also /gen/ with that many pages) until exit;
    `extra` adds routes of a test's own (tests.jssite's pages, say)."""
    with (refused_port() as external_port,
          _serve(f"http://localhost:{external_port}/external.html", pages, slow_delay, latency,
                 extra) as site):
        yield site


@contextmanager
def _serve(external_url: str, pages: int | None, slow_delay: float, latency: float,
           extra: dict[str, Response] | None) -> Iterator[Site]:
    routes = fixed_site(external_url, slow_delay)
    if pages:
        routes.update(generated_site(pages))
    routes.update(extra or {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)
    server.daemon_threads = True
    site = Site(server.server_address[1], external_url, routes, "/gen/" if pages else "/site/")
    site.latency = latency
    server.RequestHandlerClass = _handler(site)
    thread = threading.Thread(target=server.serve_forever, name="sitegen", daemon=True)
    thread.start()
    try:
        yield site
    finally:
        site.release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

"""Benchmark: conditional recrawls (127.0.0.1 only). What a `--dedup` recrawl of an unchanged
site downloads and keeps, against the first crawl, without and with conditional requests.

    .venv/bin/python bench/conditional.py --site assets [--pages 500] [--workers 4] [--json]
    .venv/bin/python bench/conditional.py --site docs [--docs /usr/share/doc/python3/html]

`assets`: bench/dedup.py's generated site with its median-sized pages and each page's
stylesheet, script and image (`pad_pages`, `add_assets`), served with an ETag and a
Last-Modified per resource and honouring If-None-Match / If-Modified-Since
(tests/conditional_site.py). `docs`: Python's HTML docs (Debian python3-doc) served by the
standard library's file server, which sends Last-Modified and honours If-Modified-Since.

Crawls the site once with archiver-crawler in HTTP mode (a private redis-server), then twice
more with --dedup: handed the first crawl's payload digests only (`<id>:dedup`: every page
downloaded, unchanged ones kept as identical-payload revisits), and handed its validators too
(`<id>:dedup:urls`, as the runner does: conditional GETs, 304s kept as server-not-modified
revisits). Bytes downloaded are what the server wrote (status lines, headers, bodies); bytes
kept are the crawl's WARC files.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from collections import Counter
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.crawl import start_redis  # noqa: E402
from bench.dedup import MEDIAN_PAD, add_assets, crawl, hand_digests, pad_pages  # noqa: E402
from tests.conditional_site import CountingWriter, serve_conditional  # noqa: E402
from tests.sitegen import serve_site  # noqa: E402

DOCS = "/usr/share/doc/python3/html"


class Served:
    """What a server wrote, and how many GETs were conditional / answered 304."""

    def __init__(self, url: str):
        self.url, self.lock, self.bytes_sent = url, threading.Lock(), 0
        self.conditional: Counter[str] = Counter()
        self.not_modified: Counter[str] = Counter()

    def reset_counts(self) -> None:
        self.bytes_sent = 0
        self.conditional.clear()
        self.not_modified.clear()


@contextmanager
def serve_docs(folder: str):
    served: Served

    class Handler(SimpleHTTPRequestHandler):
        def setup(self) -> None:
            super().setup()
            self.wfile = CountingWriter(self.wfile, served)

        def send_response(self, code: int, message: str | None = None) -> None:
            path = self.path.split("?", 1)[0]
            with served.lock:
                served.conditional[path] += "If-Modified-Since" in self.headers
                served.not_modified[path] += code == 304
            super().send_response(code, message)

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature of the base
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=folder))
    server.daemon_threads = True
    served = Served(f"http://127.0.0.1:{server.server_address[1]}/index.html")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_assets(pages: int):
    with serve_site(pages=pages) as generated:
        pad_pages(generated, MEDIAN_PAD)
        add_assets(generated)
        routes = {path: (r.body, r.content_type) for path, r in generated.routes.items()
                  if r.status == 200 and path.startswith("/gen/")}
    with serve_conditional(routes=routes, seed="/gen/") as site:
        yield site


def hand_validators(redis_port: int, crawl_id: str, index: list[dict]) -> int:
    import redis

    client = redis.Redis(port=redis_port)
    mapping = {e["url"]: json.dumps({"digest": e["digest"], "date": "2026-01-01T00:00:00Z",
                                     "file": "f1", "mime": e.get("mime", ""),
                                     "etag": e.get("etag", ""),
                                     "lastModified": e.get("lastModified", "")})
               for e in index if e.get("status") == "200" and (e.get("etag") or e.get("lastModified"))}
    if mapping:
        client.hset(f"{crawl_id}:dedup:urls", mapping=mapping)
    client.close()
    return len(mapping)


def measured(site, port: int, work: Path, crawl_id: str, workers: int, dedup: bool) -> dict:
    site.reset_counts()
    result = crawl(site.url, port, work / crawl_id, crawl_id, workers, dedup)
    return {"downloaded": site.bytes_sent, "kept": result["bytes"], "records": result["records"],
            "revisits": result["revisits"], "conditional": sum(site.conditional.values()),
            "not_modified": sum(site.not_modified.values()), "wall": round(result["wall"], 2),
            "index": result["index"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", choices=("assets", "docs"), default="assets")
    parser.add_argument("--pages", type=int, default=500, help="assets: generated pages")
    parser.add_argument("--docs", default=DOCS, help="docs: the folder of Python's HTML docs")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.site == "docs" and not Path(args.docs, "index.html").exists():
        raise SystemExit(f"no {args.docs}/index.html: apt-get install python3-doc, or --docs DIR")
    serving = serve_docs(args.docs) if args.site == "docs" else serve_assets(args.pages)
    with tempfile.TemporaryDirectory(prefix="bench-conditional-") as tmp, serving as site:
        work = Path(tmp)
        redis_proc, port = start_redis(work)
        try:
            first = measured(site, port, work, "first", args.workers, False)
            for crawl_id in ("digests", "validators"):
                hand_digests(port, crawl_id, first["index"])
            validated = hand_validators(port, "validators", first["index"])
            plain = measured(site, port, work, "digests", args.workers, True)
            conditional = measured(site, port, work, "validators", args.workers, True)
        finally:
            redis_proc.kill()
            redis_proc.wait()
    rows = {"first crawl": first, "recrawl, --dedup, digests only": plain,
            "recrawl, --dedup, conditional": conditional}
    print(f"site {args.site} ({first['records']} records in the first crawl, {validated} URLs "
          f"with validators), {args.workers} workers")
    for name, row in rows.items():
        print(f"{name:32} downloaded {row['downloaded']:>12,} B ({row['downloaded'] / first['downloaded']:6.1%})"
              f"  kept {row['kept']:>11,} B ({row['kept'] / first['kept']:6.1%})  "
              f"{row['conditional']} conditional GETs, {row['not_modified']} 304s, "
              f"{row['revisits']} revisits, {row['wall']} s")
    if args.json:
        print(json.dumps({name: {k: v for k, v in row.items() if k != "index"}
                          for name, row in rows.items()}))


if __name__ == "__main__":
    main()

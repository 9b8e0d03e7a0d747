"""How long `archiver diff` (and the admin's Compare page) takes on two crawls of a site.

    .venv/bin/python bench/diff.py [--pages 2000] [--changed 10] [--pad 56000] [--json]

Crawls tests.sitegen's generated site twice with archiver-crawler (HTTP mode, 127.0.0.1,
no deduplication), `--changed` per cent of its pages edited between the crawls, each page
padded as bench/dedup.py pads them (the default: the median HTML page). Then, in a child
process on a fresh SQLite database, keeps both WACZs as crawls and times
crawls.diffing.compare(a, b) (every page's digest, and for each changed page both texts
read, extracted and compared) and one changed page's text diff table. Prints the seconds,
the pages compared per second and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "crawler"))


def child(first: str, second: str) -> dict:
    import django

    django.setup()
    from archiver import conf
    from crawls import diffing
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlStatus, Org
    from tests.search.waczs import keep

    org = Org.objects.get_or_create(slug="bench")[0]
    crawls = []
    for wacz in (first, second):
        crawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
        Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
        crawl.refresh_from_db()
        keep(conf.get().data_dir, crawl, Path(wacz))
        crawls.append(crawl)
    started = time.perf_counter()
    diff = diffing.compare(*crawls)
    seconds = time.perf_counter() - started
    pages = len(diff.added) + len(diff.removed) + len(diff.changed) + len(diff.unchanged)
    started = time.perf_counter()
    table = diffing.text_diff_html(*crawls, diff.changed[0].url) if diff.changed else ""
    table_seconds = time.perf_counter() - started
    return {"pages": pages, "changed": len(diff.changed), "unchanged": len(diff.unchanged),
            "seconds": round(seconds, 2), "pages_per_s": round(pages / seconds, 1),
            "text_diff_seconds": round(table_seconds, 3), "text_diff_bytes": len(table),
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--changed", type=int, default=10, help="per cent of the pages edited")
    parser.add_argument("--pad", type=int, default=None, help="as bench/dedup.py's (its default)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdout.write(json.dumps(child(*args.child)) + "\n")
        return 0
    from bench.crawl import start_redis
    from bench.dedup import MEDIAN_PAD, crawl, pad_pages
    from bench.fresh import run_child
    from tests.sitegen import Response, serve_site

    pad = MEDIAN_PAD if args.pad is None else args.pad
    with tempfile.TemporaryDirectory(prefix="bench-diff-") as tmp:
        work = Path(tmp)
        redis_proc, port = start_redis(work)
        try:
            with serve_site(pages=args.pages) as site:
                if pad:
                    pad_pages(site, pad)
                crawl(site.url, port, work / "first", "first", 4, False)
                pages = sorted(p for p in site.routes if p.startswith("/gen/p"))
                for path in random.Random(7).sample(pages, len(pages) * args.changed // 100):
                    old = site.routes[path]
                    site.routes[path] = Response(body=old.body.replace(
                        b"</body>", b"<p>changed</p></body>"))
                crawl(site.url, port, work / "second", "second", 4, False)
        finally:
            redis_proc.kill()
            redis_proc.wait()
        waczs = [str(work / name / "collections" / "coll" / "coll.wacz") for name in ("first", "second")]
        result = run_child(__file__, waczs, work)
    print(f"diff of two crawls of {result['pages']} pages ({result['changed']} changed, "
          f"{result['unchanged']} unchanged; +{pad} bytes of text a page): {result['seconds']} s, "
          f"{result['pages_per_s']} pages/s; one page's text diff {result['text_diff_seconds']} s, "
          f"{result['text_diff_bytes']:,} bytes; load average {result['load_average_1m']} on "
          f"{os.cpu_count()} CPUs")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    sys.exit(main())

"""How fast quality review replays and scores pages (issue 25: >= 1 page/s on 2 cores).

    .venv/bin/python bench/qa.py [--pages 40] [--workers 2] [--json]

Crawls tests/jssite.py (--pages pages, served on 127.0.0.1) in browser mode with screenshots
and page text, with the crawler console script and a private redis-server; then, in a child
process on a fresh SQLite database, keeps its WACZ as a crawl and times runner/qa.py's review
of every page (Chromium started, every page replayed from the WACZ, scored, rows written).
Prints pages, seconds, pages/s, the mean score and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "crawler"))
sys.path.insert(2, str(ROOT / "bench"))


def child(wacz: str, workers: int) -> dict:
    import django

    django.setup()
    from archiver import conf
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlStatus, Org, review_summary
    from runner import qa
    from tests.search.waczs import keep

    crawl = Crawl.create(Org.objects.get_or_create(slug="bench")[0], CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    crawl.refresh_from_db()
    settings = conf.get()
    keep(settings.data_dir, crawl, Path(wacz))
    started = time.perf_counter()
    pages = qa.review(crawl, settings, workers=workers)
    seconds = time.perf_counter() - started
    summary = review_summary(crawl)
    return {"pages": pages, "seconds": round(seconds, 2), "pages_per_s": round(pages / seconds, 2),
            "mean_score": round(summary["mean"] or 0, 3), "workers": workers,
            "load_average_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdout.write(json.dumps(child(args.child, args.workers)) + "\n")
        return 0
    from crawl import start_redis
    from fresh import run_child

    from tests.jssite import js_site
    from tests.sitegen import serve_site

    with tempfile.TemporaryDirectory(prefix="bench-qa-") as tmp:
        tmp = Path(tmp)
        redis_proc, port = start_redis(tmp)
        try:
            with serve_site(extra=js_site(args.pages)) as site:
                crawled = subprocess.run(
                    [str(Path(sys.executable).parent / "archiver-crawler"), "--url", site.root + "/js/",
                     "--workers", str(args.workers), "--redisStoreUrl", f"redis://127.0.0.1:{port}/0",
                     "--crawlId", "bench-qa", "--collection", "bench", "--cwd", str(tmp / "crawl"),
                     "--generateWACZ", "--browser", "--screenshot", "view", "--text", "to-pages",
                     "--pageLoadTimeout", "30", "--diskUtilization", "0", "--allowNetworks", "127.0.0.1/32"],
                    env=dict(os.environ, CRAWLER_HOSTNAME="bench-0"), capture_output=True, text=True,
                    timeout=1800)
        finally:
            redis_proc.kill()
            redis_proc.wait()
        wacz = tmp / "crawl" / "collections" / "bench" / "bench.wacz"
        if crawled.returncode != 0 or not wacz.exists():
            raise SystemExit(f"the crawl failed: {crawled.stderr[-3000:]}")
        result = run_child(__file__, [str(wacz), "--workers", str(args.workers)], tmp,
                           drop=("ARCHIVER_CHROMIUM",))
    print(f"quality review: {result['pages']} pages in {result['seconds']} s = {result['pages_per_s']} pages/s "
          f"({result['workers']} workers; mean score {result['mean_score']}; load average "
          f"{result['load_average_1m']} on {os.cpu_count()} CPUs; target >= 1 page/s)")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    sys.exit(main())

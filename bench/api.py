"""Requests per second and latency of the API's crawl list and get, as the table grows.

    .venv/bin/python bench/api.py [--sizes 1000,10000,100000] [--requests 400] [--json]

Serves a throw-away data dir (SQLite) with gunicorn as scripts/start.sh does (2 workers,
4 threads), fills it with crawls up to each size in turn, and at each size measures, one
request at a time over a kept-alive connection: the first page of the list, a page deep in
it (by cursor), the list filtered by state, and one crawl by id; then the same get from 4
clients at once for throughput. Prints milliseconds (p50/p99) and requests/s per size; the
list's p99 should stay flat from 1k to 100k (keyset pagination, no OFFSET).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="crawls in the table, comma-separated")
    parser.add_argument("--requests", type=int, default=400, help="requests per measurement (default 400)")
    parser.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = parser.parse_args(argv)
    args.sizes = sorted(int(size) for size in args.sizes.split(","))
    if args.requests < 10 or args.sizes[0] < 100:
        parser.error("--requests must be at least 10 and every size at least 100")
    return args


def setup_django(data_dir: Path) -> None:
    os.environ["ARCHIVER_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "archiver.settings"
    for name in ("ARCHIVER_DATABASE_URL", "ARCHIVER_REDIS_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise


def grow(to: int) -> None:
    """Add crawls until there are `to`: a mix of states, orgs' default, one in ten tagged."""
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlStatus, Org, new_id

    org = Org.objects.get(slug="default")
    config = CrawlConfig(seeds=["https://example.com/"]).model_dump(mode="json")
    start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    have = Crawl.objects.count()
    states = [CrawlStatus.COMPLETE] * 8 + [CrawlStatus.FAILED, CrawlStatus.QUEUED]
    batch = []
    for n in range(have, to):
        status = states[n % len(states)]
        batch.append(Crawl(id=new_id(), org=org, seeds=config["seeds"], config=config,
                           tags=["weekly"] if n % 10 == 0 else [], status=status,
                           created_at=start + dt.timedelta(seconds=n), updated_at=start,
                           pages_found=80, pages_done=80, size_bytes=20_400_000,
                           retry_at=start if status == CrawlStatus.QUEUED else None))
        if len(batch) == 5000:
            Crawl.objects.bulk_create(batch)
            batch = []
    Crawl.objects.bulk_create(batch)


def timed(http, paths: list[str]) -> list[float]:
    latencies = []
    for path in paths:
        began = time.perf_counter()
        response = http.get(path)
        latencies.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"GET {path}: {response.status_code} {response.text[:200]}")
    return latencies


def stats(latencies: list[float], wall: float | None = None) -> dict:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "requests_per_s": round(len(ordered) / (wall if wall else sum(ordered) / 1000), 1),
    }


def measure(server, secret: str, requests: int) -> dict:
    from crawls.models import Crawl

    ids = list(Crawl.objects.values_list("id", flat=True).order_by("?")[:requests])
    with server.client(secret) as http:
        timed(http, ["/api/v1/crawls"] * 20)  # warm both workers
        deep = http.get("/api/v1/crawls", params={"limit": 50})
        cursor = deep.json()["next_cursor"]
        for _ in range(random.randint(5, 15)):
            cursor = http.get("/api/v1/crawls", params={"limit": 50, "cursor": cursor}).json()["next_cursor"]
        results = {
            "list_first_page": stats(timed(http, ["/api/v1/crawls?limit=50"] * requests)),
            "list_by_cursor": stats(timed(http, [f"/api/v1/crawls?limit=50&cursor={cursor}"] * requests)),
            "list_state_failed": stats(timed(http, ["/api/v1/crawls?limit=50&state=failed"] * requests)),
            "get": stats(timed(http, [f"/api/v1/crawls/{crawl_id}" for crawl_id in ids])),
        }

    def one_client(chunk):
        with server.client(secret) as http:
            return timed(http, [f"/api/v1/crawls/{crawl_id}" for crawl_id in chunk])

    chunks = [ids[n::4] for n in range(4)]
    began = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        latencies = [ms for part in pool.map(one_client, chunks) for ms in part]
    results["get_4_clients"] = stats(latencies, time.perf_counter() - began)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="abench-api-", dir="/tmp"))
    try:
        setup_django(data_dir)
        from tests.api.servers import gunicorn

        with gunicorn(data_dir) as server:
            from django.contrib.auth.models import User

            from crawls.models import ApiToken

            user = User.objects.create_superuser("bench", password=None)
            _, secret = ApiToken.issue(user, "bench", rate_limit=1_000_000)
            report = {}
            for size in args.sizes:
                began = time.monotonic()
                grow(size)
                print(f"{size} crawls (filled in {time.monotonic() - began:.0f} s)", flush=True)
                report[size] = measure(server, secret, args.requests)
                for name, numbers in report[size].items():
                    print(f"  {name:<18} p50 {numbers['p50_ms']:7.2f} ms   p99 {numbers['p99_ms']:7.2f} ms"
                          f"   {numbers['requests_per_s']:8.1f} req/s", flush=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How long handing an org's kept payloads to a crawler takes, and what they cost in Redis.

    .venv/bin/python bench/dedup_handing.py [--digests 200000] [--crawls 20] [--json]

In a fresh SQLite data dir, migrated as in production: --digests PayloadDigest rows (sha1
and sha256 digests half and half, 60-character URLs) spread over --crawls kept crawls of
5 files each, then, into a private redis-server on a free port, each layout the runner
writes before a deduplicating crawl's first launch (crawls/dedup.py): archiver's crawler's
(`<crawl id>:dedup`, `:dedup:files`) and browsertrix-crawler's (`alldupes`,
`h:<crawl id>`, `c:<crawl id>:wacz`). Prints the seconds each took, digests per second,
and the Redis memory each layout holds per digest (INFO memory, used_memory, before and
after, the database flushed between), beside the runner's estimate of it made before
writing (crawls.dedup.index_bytes) and how long that took.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "crawler"))

FILES_PER_CRAWL = 5


def child(digests: int, crawls: int, port: int) -> dict:
    import django

    django.setup()
    import redis

    from crawls import dedup
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlFile, Org, PayloadDigest

    org = Org.objects.get(slug="default")
    files = []
    for c in range(crawls):
        crawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
        for f in range(FILES_PER_CRAWL):
            files.append(CrawlFile.objects.create(
                crawl=crawl, path=f"archives/{crawl.pk}/{f}.wacz", size=10_000_000,
                sha256=hashlib.sha256(f"{c}-{f}".encode()).hexdigest()))
    rows = []
    for i in range(digests):
        raw = hashlib.sha256(str(i).encode()).digest()
        digest = (f"sha256:{raw.hex()}" if i % 2 else
                  "sha1:" + __import__("base64").b32encode(raw[:20]).decode())
        rows.append(PayloadDigest(org=org, digest=digest, url=f"http://127.0.0.1:8000/section/page-{i:08d}.html?v=1",
                                  date="2026-12-01T10:00:00Z", crawl_file=files[i % len(files)]))
    PayloadDigest.objects.bulk_create(rows, batch_size=5000)
    recrawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    client = redis.Redis(port=port)
    result = {"digests": digests, "crawls": crawls, "files": len(files)}
    for name, hand in (("archiver", dedup.hand_to_crawler), ("browsertrix", dedup.hand_to_browsertrix)):
        client.flushdb()
        before = client.info("memory")["used_memory"]
        started = time.perf_counter()
        estimate = dedup.index_bytes(recrawl, None, name == "browsertrix")
        estimated = time.perf_counter()
        handed = hand(client, recrawl)
        seconds = time.perf_counter() - estimated
        after = client.info("memory")["used_memory"]
        assert handed == digests, (name, handed)
        result[name] = {"seconds": round(seconds, 3), "digests_per_s": round(digests / seconds),
                        "estimate_seconds": round(estimated - started, 3),
                        "redis_bytes_per_digest": round((after - before) / digests, 1),
                        "estimated_bytes_per_digest": round(estimate / digests, 1)}
    client.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digests", type=int, default=200_000)
    parser.add_argument("--crawls", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    from bench.crawl import start_redis
    from tests import claimers

    with tempfile.TemporaryDirectory(prefix="bench-handing-") as tmp:
        work = Path(tmp)
        redis_proc, port = start_redis(work)
        try:
            env = claimers.child_env(f"sqlite:///{work}/bench.sqlite3", work / "data")
            env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'crawler'}"
            claimers.migrate(env)
            done = subprocess.run([sys.executable, __file__, "--child", str(args.digests),
                                   str(args.crawls), str(port)], env=env, cwd=ROOT,
                                  capture_output=True, text=True, timeout=3600)
        finally:
            redis_proc.kill()
            redis_proc.wait()
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{result['digests']:,} kept payloads in {result['files']} files of {result['crawls']} crawls")
    for name in ("archiver", "browsertrix"):
        r = result[name]
        print(f"{name + ' layout:':<20} {r['seconds']:>7.2f} s  {r['digests_per_s']:>9,} digests/s  "
              f"{r['redis_bytes_per_digest']:>6.1f} Redis bytes per digest (estimated "
              f"{r['estimated_bytes_per_digest']:.1f} in {r['estimate_seconds']:.2f} s)")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

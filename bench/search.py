"""How fast page text is indexed and searched, on SQLite and on PostgreSQL, side by side.

    .venv/bin/python bench/search.py [--pages 100000] [--database-url postgres://...] [--json]

For each database (a SQLite file in a temp data dir; with --database-url also a fresh
PostgreSQL database next to the one it names, dropped afterwards), migrated as in production:
writes --pages generated pages (about 150 words each, from a 20,000-word vocabulary with a
Zipf-like spread) into kept WACZs of 1,000 pages, then times the indexer (runner/indexing.py,
the path the daemon takes: page lists read from the WACZ, rows written, the FTS5 table or
the tsvector column and its GIN index updated) and then 200 one-word and 200 two-word
queries through crawls.search.search (limit 20, snippets included): one word of the 2,000
most frequent, two words of ranks 50 to 5,000. Targets (issue 24):
indexing >= 2,000 pages/s, query p50 <= 20 ms and p99 <= 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "crawler"))

PER_WACZ = 1000
QUERIES = 200


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 10))))
    return sorted(words)


def zipf_pick(rng: random.Random, words: list[str], k: int) -> list[str]:
    # Rank r is picked with weight 1/r, as word frequencies roughly go.
    return rng.choices(words, cum_weights=_cumulative(len(words)), k=k)


_CUM: dict[int, list[float]] = {}


def _cumulative(n: int) -> list[float]:
    if n not in _CUM:
        total, out = 0.0, []
        for r in range(1, n + 1):
            total += 1.0 / r
            out.append(total)
        _CUM[n] = out
    return _CUM[n]


def child(pages: int) -> dict:
    """In a process whose settings name the database: generate, index, query."""
    import django

    django.setup()
    from archiver import conf
    from crawls import search
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, Org, PageText
    from runner import indexing
    from tests.search.waczs import keep_pages

    rng = random.Random(24)
    words = vocabulary(rng)
    data_dir = conf.get().data_dir
    org, _ = Org.objects.get_or_create(slug="bench")
    made = Path(tempfile.mkdtemp(prefix="bench-search-"))
    for start in range(0, pages, PER_WACZ):
        crawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
        batch = [{"url": f"https://bench.test/{i}", "title": " ".join(zipf_pick(rng, words, 5)),
                  "text": " ".join(zipf_pick(rng, words, 150)), "ts": "2026-12-01T10:00:00Z",
                  "status": 200, "loadState": 4}
                 for i in range(start, min(start + PER_WACZ, pages))]
        keep_pages(data_dir, crawl, batch, made)
    started = time.perf_counter()
    while indexing.index_next(data_dir, django.utils.timezone.now()):
        pass
    seconds = time.perf_counter() - started
    indexed = PageText.objects.count()
    # One-word queries: one of the 2,000 most frequent words (the hard case: many pages
    # match and all are ranked); two-word queries: two of ranks 50..5000.
    middling = words[50:5000]
    result = {"pages": indexed, "index_seconds": round(seconds, 2),
              "index_pages_per_s": round(indexed / seconds)}
    for name, count in (("one_word", 1), ("two_words", 2)):
        times = []
        for _ in range(QUERIES):
            query = " ".join(rng.sample(middling, count)) if count > 1 else rng.choice(words[:2000])
            t0 = time.perf_counter()
            search.search(query, limit=20)
            times.append((time.perf_counter() - t0) * 1000)
        times.sort()
        result[f"{name}_p50_ms"] = round(statistics.median(times), 2)
        result[f"{name}_p99_ms"] = round(times[int(len(times) * 0.99) - 1], 2)
    return result


def run_on(database_url: str, pages: int) -> dict:
    from tests import claimers

    data_dir = Path(tempfile.mkdtemp(prefix="bench-search-data-"))
    env = claimers.child_env(database_url, data_dir)
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'crawler'}"
    claimers.migrate(env)
    done = subprocess.run([sys.executable, __file__, "--child", str(pages)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--database-url", help="postgres://... (a fresh database next to it)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdout.write(json.dumps(child(args.child)) + "\n")
        return 0
    from tests.pg import fresh_database

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite"] = run_on(f"sqlite:///{tmp}/bench.sqlite3", args.pages)
    if args.database_url:
        with fresh_database(args.database_url) as url:
            results["postgresql"] = run_on(url, args.pages)
    keys = [k for k in results["sqlite"]]
    sys.stdout.write(f"{'':22}" + "".join(f"{name:>14}" for name in results) + "\n")
    for key in keys:
        sys.stdout.write(f"{key:22}" + "".join(f"{r[key]:>14}" for r in results.values()) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    sys.exit(main())

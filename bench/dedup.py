"""Benchmark: deduplicated recrawls of tests.sitegen's generated site (127.0.0.1 only).

    .venv/bin/python bench/dedup.py [--pages 2000] [--workers 4] [--pad 56000]
                                    [--site text|assets] [--json]

Crawls the site once with archiver-crawler (private redis-server on a free port), hands the
payload digests of that WACZ to the next crawls in Redis (`<crawl id>:dedup`, as the runner
does), then recrawls: unchanged with --dedup, unchanged without it, and with 10 % of the
pages changed, with --dedup. Prints each crawl's WARC bytes and wall time, the share of the
first crawl's bytes each deduplicated recrawl stores (targets: <= 5 % unchanged, <= 15 %
with 10 % changed) and what the lookups add to crawl time (dedup vs not, same recrawl;
target <= 10 %). `--pad N` adds N bytes of text to every page (sitegen's pages are ~0.5 kB,
smaller than their own HTTP headers); the default makes a page's response record ~18 kB
gzipped, the median HTML of a web page (HTTP Archive's Web Almanac 2024, "Page Weight":
18 kB on desktop); `--pad 20000` is a small page (~7 kB), `--pad 0` the bare site.
`--site assets` gives every page what a real one loads beside its HTML (a stylesheet and a
script shared by all, an image of its own; add_assets); the default, `text`, is sitegen's
text-only pages. The crawler run is this tree's (crawler/ first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.crawl import start_redis  # noqa: E402
from tests.sitegen import Response, serve_site  # noqa: E402

# This tree's crawler, whatever the venv's archiver-crawler script points at (an editable
# install of another checkout, say): the figures are of the code beside the bench.
CRAWLER = [sys.executable, "-m", "archiver_crawler"]
CRAWLER_PATH = str(ROOT / "crawler")


def crawl(site_url: str, redis_port: int, cwd: Path, crawl_id: str, workers: int,
          dedup: bool) -> dict:
    cmd = [*CRAWLER, "--url", site_url, "--redisStoreUrl", f"redis://127.0.0.1:{redis_port}/0",
           "--crawlId", crawl_id, "--collection", "coll", "--cwd", str(cwd), "--workers",
           str(workers), "--scopeType", "prefix", "--generateWACZ", "--diskUtilization", "0",
           "--allowNetworks", "127.0.0.0/8", *(["--dedup"] if dedup else [])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "CRAWLER_HOSTNAME": f"crawl-{crawl_id}-0",
                               "PYTHONPATH": os.pathsep.join(
                                   filter(None, [CRAWLER_PATH, os.environ.get("PYTHONPATH")]))})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The crawler's CPU seconds: steadier than wall time on a loaded machine.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"crawl {crawl_id} failed: {proc.stderr.decode()[-2000:]}")
    coll = cwd / "collections" / "coll"
    warc_bytes = sum(p.stat().st_size for p in (coll / "archive").glob("*.warc.gz"))
    with zipfile.ZipFile(coll / "coll.wacz") as zf:
        index = [json.loads(line.split(" ", 2)[2])
                 for line in zf.read("indexes/index.cdxj").decode().splitlines()]
    revisits = sum(1 for e in index if e.get("mime") == "warc/revisit")
    return {"wall": wall, "cpu": cpu, "bytes": warc_bytes, "records": len(index), "revisits": revisits,
            "index": index}


def hand_digests(redis_port: int, crawl_id: str, index: list[dict]) -> None:
    import redis

    client = redis.Redis(port=redis_port)
    mapping = {e["digest"]: f"2026-01-01T00:00:00Z f1 {e['url']}" for e in index
               if e.get("status") == "200" and e.get("mime") != "warc/revisit"}
    client.hset(f"{crawl_id}:dedup", mapping=mapping)
    client.hset(f"{crawl_id}:dedup:files", "f1", json.dumps(
        {"filename": "first.wacz", "hash": "sha256:" + "0" * 64, "crawlId": "first"}))
    client.close()


def pad_pages(site, pad: int, salt: str = "") -> None:
    words = ["archive", "crawl", "page", "record", "payload", "digest", "replay", "site"]
    for path, response in list(site.routes.items()):
        if path.endswith(".html") or path == "/gen/":
            rng = random.Random(path + salt)
            text = " ".join(rng.choice(words) + str(rng.randrange(1000))
                            for _ in range(pad // 10)).encode()[:pad]
            body = response.body.replace(b"</body>", b"<p>" + text + b"</p></body>")
            site.routes[path] = Response(status=response.status, body=body,
                                         content_type=response.content_type)


# `--site assets`: what a page of a real site loads beside its HTML. The stylesheet and the
# script are shared by every page (fetched, and kept or deduplicated, once per crawl); each
# page has an image of its own. Sizes are those of a modest content site: minified CSS and
# JS that gzip to a quarter or so, and an already-compressed image (JPEG, WebP) of 60 kB.
STYLESHEET = "/gen/assets/site.css"
SCRIPT = "/gen/assets/site.js"
STYLESHEET_BYTES = 40_000
SCRIPT_BYTES = 120_000
IMAGE_BYTES = 60_000


def add_assets(site) -> None:
    """Give every generated page the stylesheet, the script and an image of its own, all
    deterministic (the same bytes every crawl, as an unchanged site serves them)."""
    site.routes[STYLESHEET] = Response(body=_code(STYLESHEET, STYLESHEET_BYTES, ".c{n} {{ margin: "
                                                  "{a}px {b}px; color: #{c:06x} }}\n"),
                                       content_type="text/css")
    site.routes[SCRIPT] = Response(body=_code(SCRIPT, SCRIPT_BYTES, "function f{n}(x){{return "
                                              "x*{a}+{b}^0x{c:06x};}}\n"),
                                   content_type="application/javascript")
    for path, response in list(site.routes.items()):
        if not (path.endswith(".html") or path == "/gen/") or not path.startswith("/gen/"):
            continue
        image = f"/gen/img/{path.rsplit('/', 1)[1].removesuffix('.html') or 'index'}.jpg"
        rng = random.Random(image)
        # JPEG's start and end markers around bytes that, like a JPEG's, do not compress.
        site.routes[image] = Response(body=b"\xff\xd8\xff\xe0" + rng.randbytes(IMAGE_BYTES - 6)
                                      + b"\xff\xd9", content_type="image/jpeg")
        body = response.body.replace(
            b"</head>", f'<link rel="stylesheet" href="{STYLESHEET}"><script src="{SCRIPT}">'
                        f'</script></head>'.encode()).replace(
            b"</body>", f'<img src="{image}" width="800" height="450" alt=""></body>'.encode())
        site.routes[path] = Response(status=response.status, body=body,
                                     content_type=response.content_type)


def check_assets(site, index: list[dict]) -> None:
    """The crawler (HTTP mode) fetched every page's requisites: else the figures would be of
    a site without them."""
    served = {site.root + p for p in site.routes
              if p.startswith("/gen/img/") or p in (STYLESHEET, SCRIPT)}
    missing = served - {e["url"] for e in index if e.get("status") == "200"}
    if missing:
        raise SystemExit(f"the first crawl did not archive {len(missing)} requisite(s), "
                         f"e.g. {sorted(missing)[:3]}")


def _code(path: str, size: int, line: str) -> bytes:
    rng = random.Random(path)
    out, n = [], 0
    while sum(map(len, out)) < size:
        out.append(line.format(n=n, a=rng.randrange(64), b=rng.randrange(64),
                               c=rng.randrange(1 << 24)))
        n += 1
    return "".join(out).encode()[:size]


# Bytes of word-like text that make a page's gzipped response record the median HTML's
# 18 kB (measured: 36.1 MB for 2,003 records at 2,000 pages).
MEDIAN_PAD = 56000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pad", type=int, default=MEDIAN_PAD)
    parser.add_argument("--site", choices=("text", "assets"), default="text",
                        help="text: sitegen's pages, text only (the default); assets: each "
                             "page also loads a shared stylesheet and script and an image "
                             "of its own")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp, \
            serve_site(pages=args.pages) as site:
        work = Path(tmp)
        redis_proc, port = start_redis(work)
        try:
            if args.pad:
                pad_pages(site, args.pad)
            if args.site == "assets":
                add_assets(site)
            first = crawl(site.url, port, work / "first", "first", args.workers, False)
            if args.site == "assets":
                check_assets(site, first["index"])
            for crawl_id in ("same-dedup", "changed-dedup"):
                hand_digests(port, crawl_id, first["index"])
            same = crawl(site.url, port, work / "same", "same-dedup", args.workers, True)
            plain = crawl(site.url, port, work / "plain", "same-plain", args.workers, False)
            pages = sorted(p for p in site.routes if p.startswith("/gen/p"))
            changed = random.Random(7).sample(pages, len(pages) // 10)
            for path in changed:
                old = site.routes[path]
                site.routes[path] = Response(body=old.body.replace(b"</body>",
                                                                   b"<p>changed</p></body>"))
            diff = crawl(site.url, port, work / "changed", "changed-dedup", args.workers, True)
        finally:
            redis_proc.kill()
            redis_proc.wait()
    result = {
        "pages": args.pages, "pad": args.pad, "site": args.site, "workers": args.workers,
        "first_records": first["records"],
        "first_bytes": first["bytes"], "first_wall": round(first["wall"], 2),
        "unchanged_bytes": same["bytes"], "unchanged_revisits": same["revisits"],
        "unchanged_share": round(same["bytes"] / first["bytes"], 4),
        "changed_bytes": diff["bytes"], "changed_revisits": diff["revisits"],
        "changed_share": round(diff["bytes"] / first["bytes"], 4),
        "recrawl_wall_dedup": round(same["wall"], 2), "recrawl_wall_plain": round(plain["wall"], 2),
        "lookup_overhead": round(same["wall"] / plain["wall"] - 1, 4),
        "recrawl_cpu_dedup": round(same["cpu"], 2), "recrawl_cpu_plain": round(plain["cpu"], 2),
        "lookup_overhead_cpu": round(same["cpu"] / plain["cpu"] - 1, 4),
    }
    assets = ", a stylesheet, a script and an image each" if args.site == "assets" else ""
    print(f"pages {args.pages} (+{args.pad} bytes of text each{assets}), {args.workers} workers")
    print(f"first crawl:          {first['bytes']:>12,} bytes  {first['wall']:.1f} s")
    print(f"unchanged, --dedup:   {same['bytes']:>12,} bytes  {same['wall']:.1f} s  "
          f"{result['unchanged_share']:.1%} of the first (target <= 5 %), "
          f"{same['revisits']} revisits")
    print(f"10 % changed, --dedup:{diff['bytes']:>12,} bytes  {diff['wall']:.1f} s  "
          f"{result['changed_share']:.1%} of the first (target <= 15 %)")
    print(f"unchanged, no dedup:  {plain['bytes']:>12,} bytes  {plain['wall']:.1f} s; "
          f"lookups add {result['lookup_overhead']:+.1%} (target <= 10 %)")
    print(f"crawler CPU, recrawl: {same['cpu']:.1f} s with --dedup, {plain['cpu']:.1f} s without "
          f"({result['lookup_overhead_cpu']:+.1%})")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()

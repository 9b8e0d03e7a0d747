"""Benchmark: the browser engine (archiver_crawler.browser) on a generated JS site.

    .venv/bin/python bench/browser_engine.py [--pages 40] [--workers 4] [--latency 0]
                                             [--wait-until load,networkidle2] [--json]

Serves tests.jssite's site (127.0.0.1 only; every page's links drawn by its script, half of
them from fetched JSON), then crawls it breadth-first from /js/ with one engine (one
Chromium) and `--workers` tabs at once, following only the links the live DOM gave, and
writes each page's records to a WARC. Prints pages found (of the site's), wall seconds per
page (from the first page's start, the browser's start excluded and shown apart), CPU
seconds of this process and of the browser, and peak memory: the browser's PSS (every
process of its group, shared pages counted once), its RSS sum (shared pages counted per
process), this process's peak RSS, and the two added. The crawler's browser mode against its HTTP mode,
end to end: bench/crawl.py --js-pages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "crawler")]

from archiver_crawler.browser import (  # noqa: E402
    BrowserEngine,
    EngineOptions,
    PageOptions,
    write_capture,
)
from archiver_crawler.netpolicy import AddressPolicy, parse_networks  # noqa: E402
from archiver_crawler.warc import WarcFile  # noqa: E402

from tests.jssite import js_pages, js_site  # noqa: E402
from tests.sitegen import serve_site  # noqa: E402


def browser_cpu(engine: BrowserEngine) -> float:
    """CPU seconds (user + system) of the browser's live processes, from /proc."""
    total = 0
    for pid in engine.browser.group_pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            continue
    return total / 100


async def sample(engine: BrowserEngine, peaks: dict, stop: asyncio.Event) -> None:
    while not stop.is_set():
        browser = engine.browser
        if browser is not None:
            pss = await asyncio.to_thread(browser.memory_bytes)
            rss = await asyncio.to_thread(browser.rss_bytes)
            peaks["pss"], peaks["rss"] = max(peaks["pss"], pss), max(peaks["rss"], rss)
            peaks["cpu"] = max(peaks["cpu"], await asyncio.to_thread(browser_cpu, engine))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)


async def crawl(root: str, args, warc: WarcFile) -> dict:
    options = EngineOptions(workers=args.workers, page=PageOptions(
        wait_until=tuple(args.wait_until.split(","))))
    engine = BrowserEngine(AddressPolicy(parse_networks(["127.0.0.0/8"])), options)
    started = time.perf_counter()
    await engine.start()
    startup = time.perf_counter() - started
    peaks, stop = {"pss": 0, "rss": 0, "cpu": 0.0}, asyncio.Event()
    sampler = asyncio.create_task(sample(engine, peaks, stop))
    seen, queue, done, failed = {root + "/js/"}, asyncio.Queue(), 0, 0
    queue.put_nowait(root + "/js/")
    requisites: set[str] = set()

    async def worker():
        nonlocal done, failed
        while True:
            url = await queue.get()
            capture = await engine.capture(url)
            write_capture(warc, capture, f"p{done}", seen=lambda u: u in requisites
                          or requisites.add(u))
            done, failed = done + 1, failed + (1 if capture.error else 0)
            for link in capture.links:
                if link.startswith(root + "/js/") and link not in seen:
                    seen.add(link)
                    queue.put_nowait(link)
            queue.task_done()

    first = time.perf_counter()
    workers = [asyncio.create_task(worker()) for _ in range(args.workers)]
    await queue.join()
    wall = time.perf_counter() - first
    for task in workers:
        task.cancel()
    stop.set()
    await sampler
    restarts = engine.restarts
    await engine.close()
    return {"pages": done, "failed": failed, "found": len(seen), "wall": wall,
            "startup": startup, "restarts": restarts, "peaks": peaks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--wait-until", default="load,networkidle2")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cpu_before = time.process_time()
    with serve_site(extra=js_site(args.pages), latency=args.latency) as site, \
            tempfile.TemporaryDirectory() as tmp:
        warc = WarcFile(Path(tmp), "bench", "bench")
        result = asyncio.run(crawl(site.root, args, warc))
        warc.close()
        result["warc_bytes"] = warc.size
        expected = len(js_pages(site.root, args.pages))
    own_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peaks = result.pop("peaks")
    result.update(expected=expected, per_page=result["wall"] / max(result["pages"], 1),
                  cpu_self=time.process_time() - cpu_before, cpu_browser=peaks["cpu"],
                  browser_pss_mb=peaks["pss"] / 2**20, browser_rss_sum_mb=peaks["rss"] / 2**20,
                  own_rss_mb=own_rss / 2**20,
                  instance_mb=(peaks["pss"] + own_rss) / 2**20, workers=args.workers,
                  latency=args.latency, wait_until=args.wait_until)
    print(f"pages {result['pages']}/{result['expected']} (failed {result['failed']}), "
          f"{result['per_page']:.3f} s/page ({result['wall']:.1f} s; browser start "
          f"{result['startup']:.1f} s), CPU self {result['cpu_self']:.1f} s + browser "
          f"{result['cpu_browser']:.1f} s, peak browser PSS {result['browser_pss_mb']:.0f} MB "
          f"(RSS sum {result['browser_rss_sum_mb']:.0f} MB) + own RSS "
          f"{result['own_rss_mb']:.0f} MB = {result['instance_mb']:.0f} MB, "
          f"restarts {result['restarts']}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()

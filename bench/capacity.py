"""The capacity model's inputs: `python bench/capacity.py [--json]`.

What one runner costs per tick and per active crawl, and what one crawler costs, measured
here so docs/scaling.md can predict a larger set-up from counts rather than guesses:

1. Supervision ticks with 10 and with 50 active crawls (fake launcher, real Redis, SQLite):
   database queries (reads and writes) and Redis commands per tick, the runner's CPU time
   per tick; the slope between the two gives the cost per active crawl, the intercept the
   runner's fixed cost. Counts do not depend on the machine's load; CPU times do.
2. One real crawl with archiver's crawler as a local process (a generated site on
   127.0.0.1, 4 workers): the crawler's peak memory, CPU per page, and the Redis commands
   per page of the crawler and the runner together.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("ARCHIVER_HOST_RATE", "0")  # local sites, as fast as they answer (docs/crawlers.md)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from latency import setup_django  # noqa: E402


def redis_commands(client) -> int:
    return int(client.info("stats")["total_commands_processed"])


def tick_costs(port: int, data_dir: Path, active_counts: tuple[int, ...], ticks: int) -> list[dict]:
    import redis
    from django.db import connection
    from django.utils import timezone

    from archiver.conf import Settings
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, Org
    from runner.daemon import Runner
    from runner.launchers import hostname
    from runner.progress import ProgressStore
    from runner.redis_server import RedisEndpoint
    from tests.fakes import FakeLauncher

    admin = redis.Redis(port=port)
    org = Org.objects.get_or_create(slug="default")[0]
    config = CrawlConfig(seeds=["http://127.0.0.1:9/"])
    results = []
    for active in active_counts:
        Crawl.objects.all().delete()
        now = timezone.now()
        settings = Settings(data_dir=data_dir, max_concurrent_crawls=active, lease_seconds=30, host_rate=0.0)
        store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=port, databases=256))
        runner = Runner(settings, FakeLauncher(), store, host_check=lambda crawl: None)
        runner.register(now)
        crawls = [Crawl.create(org, config, now=now) for _ in range(active)]
        runner.tick(now)
        for crawl in crawls:  # what the crawlers would have written
            crawl.refresh_from_db()
            client = store.client(crawl.redis_db)
            client.set(f"{crawl.pk}:d", 5)
            client.hset(f"{crawl.pk}:status", hostname(crawl.pk, 0), "running")
            client.hset(f"{crawl.pk}:size", hostname(crawl.pk, 0), 12345)
        for _ in range(3):
            runner.tick(timezone.now())  # warm
        reads = writes = 0
        cpu = 0.0
        commands = 0

        def count(execute, sql, params, many, context):
            nonlocal reads, writes
            if sql.lstrip().upper().startswith("SELECT"):
                reads += 1
            elif not sql.lstrip().upper().startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE")):
                writes += 1
            return execute(sql, params, many, context)

        for i in range(ticks):
            if i % 2 == 0:  # half the ticks see progress: the crawlers' counters moved
                for crawl in crawls:
                    store.client(crawl.redis_db).incr(f"{crawl.pk}:d")
            before = redis_commands(admin)
            started = time.process_time()
            with connection.execute_wrapper(count):
                runner.tick(timezone.now())
            cpu += time.process_time() - started
            commands += redis_commands(admin) - before - 1  # not our own INFO
        results.append({"active": active, "db_reads_per_tick": round(reads / ticks, 1),
                        "db_writes_per_tick": round(writes / ticks, 1),
                        "redis_commands_per_tick": round(commands / ticks, 1),
                        "cpu_ms_per_tick": round(cpu / ticks * 1000, 2)})
        for crawl in crawls:
            store.client(crawl.redis_db).flushdb()
        store.close()
    Crawl.objects.all().delete()  # else the crawler measurement's runner adopts them
    return results


def crawler_cost(port: int, data_dir: Path, pages: int) -> dict:
    from django.utils import timezone

    from archiver.conf import Settings
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, Org
    from runner.daemon import Runner
    from runner.launchers import LocalLauncher
    from runner.progress import ProgressStore
    from runner.redis_server import RedisEndpoint
    from tests.sitegen import serve_site

    settings = Settings(data_dir=data_dir, launcher="local", crawl_allow_networks=("127.0.0.0/8",), host_rate=0.0)
    store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=port, databases=256))
    runner = Runner(settings, LocalLauncher(settings), store, host_check=lambda crawl: None)
    runner.register(timezone.now())
    peak_kb, cpu_s, stop = [0], [0.0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            roots = [instance.pid for instance in runner.launcher.list() if instance.pid]
            rss, cpu = 0, 0.0
            for proc in tree(roots):  # the launcher's process may be a wrapper: its children too
                if not mentions(proc, str(settings.crawls_dir)):  # a pid reused by someone else
                    continue
                kb, seconds = usage(proc)
                rss, cpu = rss + kb, cpu + seconds
            peak_kb[0], cpu_s[0] = max(peak_kb[0], rss), max(cpu_s[0], cpu)
            time.sleep(0.05)

    import redis

    admin = redis.Redis(port=port)
    commands_before = redis_commands(admin)
    with serve_site(pages=pages) as site:
        org = Org.objects.get_or_create(slug="default")[0]
        crawl = Crawl.create(org, CrawlConfig(seeds=[site.url], workers=4), now=timezone.now())
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        while not Crawl.objects.get(pk=crawl.pk).is_final and time.monotonic() - started < 300:
            runner.tick(timezone.now())
            time.sleep(0.2)
        stop.set()
        sampler.join()
    crawl.refresh_from_db()
    store.close()
    commands = redis_commands(admin) - commands_before
    return {"redis_commands_per_page": round(commands / max(crawl.pages_done, 1), 1),"status": crawl.status, "pages": crawl.pages_done, "size_bytes": crawl.size_bytes,
            "seconds": round(time.monotonic() - started, 1), "crawler_peak_rss_mb": round(peak_kb[0] / 1024, 1),
            "crawler_cpu_s": round(cpu_s[0], 2),
            "crawler_cpu_ms_per_page": round(cpu_s[0] * 1000 / max(crawl.pages_done, 1), 1)}


def tree(roots: list[int]) -> set[int]:
    """`roots` and all their descendants, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier.extend(children)
    return found


def mentions(pid: int, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def usage(pid: int) -> tuple[int, float]:
    """(resident kB, CPU seconds) of a live process; (0, 0) for one gone or a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0.0
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0)
    return rss, (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--pages", type=int, default=200)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="acap-", dir="/tmp"))
    setup_django(data_dir, ARCHIVER_LOG_LEVEL="WARNING")
    from tests.ports import free_port

    port = free_port()
    redis_dir = data_dir / "redis-bench"
    redis_dir.mkdir()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--databases", "256", "--dir", str(redis_dir)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        ticks = tick_costs(port, data_dir, (10, 50), args.ticks)
        small, large = ticks
        per_crawl = {key: round((large[key] - small[key]) / (large["active"] - small["active"]), 3)
                     for key in ("db_reads_per_tick", "db_writes_per_tick", "redis_commands_per_tick",
                                 "cpu_ms_per_tick")}
        fixed = {key: round(small[key] - per_crawl[key] * small["active"], 2) for key in per_crawl}
        report = {"ticks": ticks, "per_active_crawl": per_crawl, "fixed_per_tick": fixed,
                  "runner_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "crawler": crawler_cost(port, data_dir, args.pages),
                  "load_average": round(os.getloadavg()[0], 2)}
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()

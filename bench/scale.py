"""One host at full size: `python bench/scale.py --concurrent 100 --crawls 200`.

A real `manage.py run --daemon --no-live` on a fresh data dir (SQLite, embedded Redis, the
local launcher) whose crawler is tests/conformance/fake_crawler.py, as bench/daemon_memory.py
runs it: 3 pages of a generated site on 127.0.0.1 per crawl, so every crawl goes through the
daemon's whole path (claim, launch, supervise, package, ingest, finish). The bench keeps
`--concurrent` crawls running and as many queued until `--crawls` have finished, counts the
crawler processes alive twice a second, stops the daemon with SIGTERM, and prints ONE JSON
line:

- crawls_per_s: finished crawls over the wall time from the first added to the last final;
- daemon_cpu_ms_per_crawl: the daemon process's own CPU (not its crawlers', not Redis's)
  over that time, per crawl;
- tick_p50_ms, tick_p99_ms, tick_max_ms, lease_renewal_max_late_s: from the daemon's
  <data_dir>/run/stats.json (runner/tick_stats.py; percentiles to 5 %); the lateness is a
  renewal's time minus its lease's expiry, so it must stay below 0;
- crawlers_alive_p50: the median of the crawler processes alive at the samples, once the
  first crawl ran and until fewer than `--concurrent` were left to finish;
- failed: crawls that ended in anything but complete or stopped_page_limit;
- stop_s: from SIGTERM to the daemon's exit; load_1m at the start and the end (the machine
  may be shared: the numbers are indicative).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ARCHIVER_HOST_RATE", "0")  # local sites, as fast as they answer (docs/crawlers.md)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from daemon_memory import FAKE, proc_figures  # noqa: E402
from latency import leave_nothing_behind, setup_django  # noqa: E402

from tests.chaos.harness import processes_mentioning  # noqa: E402

SAMPLE_EVERY = 0.5  # seconds
FINE = ("complete", "stopped_page_limit")


def crawlers_alive(data_dir: Path) -> int:
    """Crawler instances alive in this data dir: their wrappers (runner/local_wrapper.py),
    which live as long as their crawler and name the data dir in their argv."""
    count = 0
    for pid in processes_mentioning(str(data_dir)):
        try:
            count += b"local_wrapper" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
    return count


def start_daemon(data_dir: Path, concurrent: int) -> subprocess.Popen:
    env = {"ARCHIVER_LAUNCHER": "local", "ARCHIVER_MAX_CONCURRENT_CRAWLS": str(concurrent),
           "ARCHIVER_LOCAL_CRAWLER_COMMAND": f"{sys.executable} {FAKE}",
           "ARCHIVER_POLL_INTERVAL": "2", "ARCHIVER_LOG_LEVEL": "WARNING"}
    os.environ.pop("ARCHIVER_REDIS_URL", None)
    setup_django(data_dir, **env)
    from crawls.models import RunnerRecord

    daemon = subprocess.Popen([sys.executable, "manage.py", "run", "--daemon", "--no-live"], cwd=ROOT,
                              env=os.environ.copy(), stdout=subprocess.DEVNULL,
                              stderr=open(data_dir / "daemon.log", "w"))  # noqa: SIM115
    deadline = time.monotonic() + 300
    while not RunnerRecord.objects.filter(stopped_at__isnull=True).exists():
        if time.monotonic() > deadline or daemon.poll() is not None:
            raise SystemExit(f"the daemon did not start; see {data_dir / 'daemon.log'}")
        time.sleep(0.1)
    return daemon


def feed(daemon: subprocess.Popen, data_dir: Path, crawls: int, concurrent: int) -> dict:
    """Keep `concurrent` crawls running and as many queued until `crawls` are final."""
    from django.db.models import Count

    from crawls import wake
    from crawls.config import CrawlConfig
    from crawls.lease import db_now
    from crawls.models import Crawl, Org
    from tests.sitegen import serve_site

    org = Org.objects.get_or_create(slug="default")[0]
    alive: list[int] = []
    added = finished = 0
    with serve_site(pages=10) as site:
        config = CrawlConfig(seeds=[f"{site.root}/gen/p{n}.html" for n in range(1, 4)],
                             scope_type="page", depth=0, page_limit=3)
        started, cpu_before = time.monotonic(), proc_figures(daemon.pid)[1]
        while finished < crawls:
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited {daemon.returncode}; see {data_dir / 'daemon.log'}")
            finished = Crawl.objects.exclude(pk__in=Crawl.objects.active().values("pk")).count()
            queued = added - finished
            if queued < 2 * concurrent and added < crawls:
                batch = min(crawls - added, 2 * concurrent - queued)
                now = db_now()
                for _ in range(batch):
                    Crawl.create(org, config, now=now)
                added += batch
                wake.nudge()
            running = crawlers_alive(data_dir)
            if (running or alive) and finished <= crawls - concurrent:
                alive.append(running)
            time.sleep(SAMPLE_EVERY)
        wall, cpu = time.monotonic() - started, proc_figures(daemon.pid)[1] - cpu_before
    states = dict(Crawl.objects.values_list("status").annotate(n=Count("pk")).order_by())
    return {"crawls_per_s": round(crawls / wall, 2), "daemon_cpu_ms_per_crawl": round(cpu * 1000 / crawls, 1),
            "crawlers_alive_p50": statistics.median(alive) if alive else 0,
            "crawlers_alive_max": max(alive, default=0),
            "failed": sum(n for status, n in states.items() if status not in FINE), "states": states}


def run(crawls: int, concurrent: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="ascale-", dir="/tmp"))
    (data_dir / "conformance.json").write_text("{}")
    load_start = os.getloadavg()[0]
    daemon = start_daemon(data_dir, concurrent)
    try:
        result = feed(daemon, data_dir, crawls, concurrent)
        stopping = time.monotonic()
        daemon.terminate()
        daemon.wait(timeout=120)
        result["stop_s"] = round(time.monotonic() - stopping, 2)
        stats = json.loads((data_dir / "run" / "stats.json").read_text())
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        leave_nothing_behind(data_dir)
    ticks = {key: stats[key] for key in ("tick_p50_ms", "tick_p99_ms", "tick_max_ms", "lease_renewal_max_late_s")}
    return {"concurrent": concurrent, "crawls": crawls, **result, **ticks, "ticks": stats["ticks"],
            "load_1m": [round(load_start, 1), round(os.getloadavg()[0], 1)], "cores": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=10)
    parser.add_argument("--crawls", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(run(args.crawls, args.concurrent)))  # noqa: T201 - the benchmark's output


if __name__ == "__main__":
    main()

"""The daemon's memory over thousands of crawls:
`python bench/daemon_memory.py [--crawls 5000] [--concurrent 50] [--every 100]
[--baseline 500] [--census] [--json]`.

A real `manage.py run --daemon --no-live` on a fresh data dir (SQLite, embedded Redis, the
local launcher) whose crawler is tests/conformance/fake_crawler.py: a short Python process
that fetches its seeds from a generated site on 127.0.0.1 (3 pages here: the page limit of
the issue's run), writes a WARC and a WACZ and exits 0, so every crawl goes through the
daemon's whole path (claim, launch, supervise, package, ingest, finish) for ~0.1 s of CPU.
The bench keeps `--concurrent` crawls running and as many queued, and every `--every`
finished crawls reads the daemon's RSS and CPU from /proc. It prints the samples and the
growth after the first 500 finished crawls (target: < 5 MB over 5,000 crawls).

`--census` has the daemon count its live objects by type (gc.get_objects()) at each sample
and prints the types that grew most between the baseline's sample and the last.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ARCHIVER_HOST_RATE", "0")  # local sites, as fast as they answer (docs/crawlers.md)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from latency import leave_nothing_behind, setup_django, stop_daemon  # noqa: E402

FAKE = ROOT / "tests" / "conformance" / "fake_crawler.py"

# Runs the daemon's command in this interpreter; each SIGUSR1 writes a census of the objects
# the garbage collector tracks, by type (tracemalloc made the daemon too slow on a loaded
# 2-core machine to keep 50 crawls going: it measured itself, not the daemon).
TRACED = """
import collections, gc, json, os, signal, sys
folder, count = sys.argv[1], [0]
def dump(*_):
    count[0] += 1
    census = collections.Counter(type(o).__module__ + "." + type(o).__qualname__ for o in gc.get_objects())
    with open(os.path.join(folder, f"census-{count[0]:04d}"), "w") as out:
        json.dump(census, out)
signal.signal(signal.SIGUSR1, dump)
sys.argv = ["manage.py", "run", "--daemon", "--no-live"]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""


def proc_figures(pid: int) -> tuple[float, float]:
    """(RSS in MB, CPU seconds) of one process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return rss_kb / 1024, cpu


def load() -> float:
    return os.getloadavg()[0]


def run(crawls: int, concurrent: int, every: int, baseline: int, traced: bool, verbose: bool) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="dmem-", dir="/tmp"))
    snaps = data_dir / "snapshots"
    snaps.mkdir()
    (data_dir / "conformance.json").write_text("{}")
    env = {"ARCHIVER_LAUNCHER": "local", "ARCHIVER_MAX_CONCURRENT_CRAWLS": str(concurrent),
           "ARCHIVER_LOCAL_CRAWLER_COMMAND": f"{sys.executable} {FAKE}",
           "ARCHIVER_POLL_INTERVAL": "2", "ARCHIVER_LOG_LEVEL": "WARNING"}
    os.environ.pop("ARCHIVER_REDIS_URL", None)
    setup_django(data_dir, **env)
    from crawls import wake
    from crawls.config import CrawlConfig
    from crawls.lease import db_now
    from crawls.models import Crawl, Org, RunnerRecord
    from tests.sitegen import serve_site

    command = [sys.executable, "-c", TRACED, str(snaps)] if traced else \
        [sys.executable, "manage.py", "run", "--daemon", "--no-live"]
    daemon = subprocess.Popen(command, cwd=ROOT, env=os.environ.copy(), stdout=subprocess.DEVNULL,
                              stderr=open(data_dir / "daemon.log", "w"))  # noqa: SIM115
    samples: list[dict] = []
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 300
        while not RunnerRecord.objects.filter(stopped_at__isnull=True).exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit(f"the daemon did not start; see {data_dir / 'daemon.log'}")
            time.sleep(0.1)
        org = Org.objects.get_or_create(slug="default")[0]
        with serve_site(pages=10) as site:
            seeds = [f"{site.root}/gen/p{n}.html" for n in range(1, 4)]
            config = CrawlConfig(seeds=seeds, scope_type="page", depth=0, page_limit=3)
            added = 0
            next_sample = 0
            while True:
                finished = Crawl.objects.exclude(pk__in=Crawl.objects.active().values("pk")).count()
                if finished >= next_sample:
                    rss, cpu = proc_figures(daemon.pid)
                    samples.append({"finished": finished, "rss_mb": round(rss, 2), "cpu_s": round(cpu, 2),
                                    "wall_s": round(time.monotonic() - started, 1), "load": round(load(), 1)})
                    if traced:
                        daemon.send_signal(signal.SIGUSR1)
                    if verbose:
                        print(json.dumps(samples[-1]), file=sys.stderr, flush=True)
                    next_sample = (finished // every + 1) * every
                if finished >= crawls:
                    break
                if daemon.poll() is not None:
                    raise SystemExit(f"the daemon exited {daemon.returncode}; see {data_dir / 'daemon.log'}")
                queued = added - finished
                if queued < 2 * concurrent and added < crawls:
                    batch = min(crawls - added, 2 * concurrent - queued)
                    now = db_now()
                    for _ in range(batch):
                        Crawl.create(org, config, now=now)
                    added += batch
                    wake.nudge()
                time.sleep(0.5)
        states = _states(Crawl)
    finally:
        stop_daemon(daemon, 120)
        top = diff_census(snaps, baseline // every) if traced else []
        leave_nothing_behind(data_dir)
    base = next((s for s in samples if s["finished"] >= baseline), samples[0])
    last = samples[-1]
    span = max(1, last["finished"] - base["finished"])
    return {"crawls": crawls, "concurrent": concurrent, "baseline": baseline, "states": states, "samples": samples,
            "rss_after_baseline_mb": base["rss_mb"], "rss_last_mb": last["rss_mb"],
            "growth_after_baseline_mb": round(last["rss_mb"] - base["rss_mb"], 2),
            "growth_per_crawl_kb": round((last["rss_mb"] - base["rss_mb"]) * 1024 / span, 2),
            "cpu_per_crawl_ms": round((last["cpu_s"] - base["cpu_s"]) * 1000 / span, 1),
            "peak_rss_mb": max(s["rss_mb"] for s in samples), "objects_grown": top}


def _states(Crawl) -> dict:
    from django.db.models import Count

    return {row["status"]: row["n"] for row in Crawl.objects.values("status").annotate(n=Count("pk"))}


def diff_census(snaps: Path, first_index: int) -> list[str]:
    """The types whose live objects grew most between the census at the baseline and the last."""
    deadline = time.monotonic() + 30
    files = sorted(snaps.glob("census-*"))
    while len(files) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        files = sorted(snaps.glob("census-*"))
    if len(files) < 2:
        return []
    first = json.loads(files[min(len(files) - 2, first_index)].read_text())
    last = json.loads(files[-1].read_text())
    growth = sorted(((last[name] - first.get(name, 0), name) for name in last), reverse=True)
    return [f"{grew:+d} {name} (now {last[name]})" for grew, name in growth[:15] if grew > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crawls", type=int, default=5000)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--every", type=int, default=100, help="finished crawls between samples")
    parser.add_argument("--baseline", type=int, default=500,
                        help="finished crawls before growth is counted (start-up, caches filling)")
    parser.add_argument("--census", action="store_true", help="count live objects by type at each sample")
    parser.add_argument("--verbose", action="store_true", help="each sample on stderr as it is taken")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.crawls, args.concurrent, args.every, args.baseline, args.census, args.verbose)
    for sample in result["samples"]:
        print(f"{sample['finished']:>6} finished  RSS {sample['rss_mb']:7.1f} MB  CPU {sample['cpu_s']:7.1f} s"
              f"  {sample['wall_s']:7.1f} s  load {sample['load']}")
    print(f"states: {result['states']}")
    print(f"after {result['baseline']}: {result['rss_after_baseline_mb']} MB; last: {result['rss_last_mb']} MB; growth "
          f"{result['growth_after_baseline_mb']} MB ({result['growth_per_crawl_kb']} kB per crawl), "
          f"{result['cpu_per_crawl_ms']} ms daemon CPU per crawl; peak {result['peak_rss_mb']} MB")
    for line in result["objects_grown"]:
        print(line)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if k not in ("samples",)}))


if __name__ == "__main__":
    main()

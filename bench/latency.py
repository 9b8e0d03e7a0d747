"""Runner latency and tick cost: `python bench/latency.py [--json] [--crawls 20]`.

1. `add` to first `running`: a `manage.py run --daemon` on a fresh data dir (embedded Redis),
   crawls added one at a time the way the CLI adds them (row + nudge), p50/p99 over N
   crawls, for the local launcher and, where an engine answers with the image, Docker.
2. One supervision tick with 50 active crawls (fake launcher, real Redis) in a database
   holding 1,000 finished crawls, then 100,000: the cost must stay flat.

Each measurement runs in a subprocess of its own (a Django process has one database).
Targets: p50 <= 1 s with Docker including the container start; tick <= 50 ms; ratio <= 1.2.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ARCHIVER_HOST_RATE", "0")  # local sites, as fast as they answer (docs/crawlers.md)

ROOT = Path(__file__).resolve().parent.parent


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def setup_django(data_dir: Path, **env: str) -> None:
    os.environ.update({"ARCHIVER_DATA_DIR": str(data_dir), **env})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "archiver.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- 1. add -> running ---------------------------------------------------------------------


def measure_start(launcher: str, crawls: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="abench-", dir="/tmp"))
    env = {"ARCHIVER_LAUNCHER": launcher, "ARCHIVER_MAX_CONCURRENT_CRAWLS": str(crawls + 5),
           "ARCHIVER_POLL_INTERVAL": "2", "ARCHIVER_LOG_LEVEL": "WARNING"}
    os.environ.pop("ARCHIVER_REDIS_URL", None)
    setup_django(data_dir, **env)
    from crawls import wake
    from crawls.config import CrawlConfig
    from crawls.lease import db_now
    from crawls.models import Crawl, Org, RunnerRecord
    from tests.sitegen import serve_site

    daemon_log = os.environ.get("ARCHIVER_BENCH_DAEMON_LOG")
    daemon = subprocess.Popen([sys.executable, "manage.py", "run", "--daemon", "--no-live"], cwd=ROOT,
                              env={**os.environ, "ARCHIVER_LOG_LEVEL": "INFO" if daemon_log else "WARNING"},
                              stdout=subprocess.DEVNULL,
                              stderr=open(daemon_log, "w") if daemon_log else subprocess.DEVNULL)  # noqa: SIM115
    latencies = []
    try:
        deadline = time.monotonic() + 60
        while not RunnerRecord.objects.filter(stopped_at__isnull=True).exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("the daemon did not start")
            time.sleep(0.05)
        time.sleep(0.5)  # past its first tick and into its wait on the wake socket
        org = Org.objects.get_or_create(slug="default")[0]
        with serve_site() as site:
            config = CrawlConfig(seeds=[site.url], scope_type="page", depth=0)
            for _ in range(crawls):
                started = time.monotonic()
                crawl = Crawl.create(org, config, now=db_now())
                wake.nudge()
                while Crawl.objects.filter(pk=crawl.pk).values_list("status", flat=True).get() not in (
                        "running", "pending_wait", "generate_wacz", "complete"):
                    if time.monotonic() - started > 60:
                        raise SystemExit(f"crawl {crawl.pk} did not start: "
                                         f"{Crawl.objects.get(pk=crawl.pk).waiting_reason}")
                    time.sleep(0.002)
                latencies.append(time.monotonic() - started)
            deadline = time.monotonic() + 120
            while Crawl.objects.active().exists() and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        stop_daemon(daemon, 60)
        leave_nothing_behind(data_dir)
    return {"launcher": launcher, "crawls": crawls, "p50_s": round(percentile(latencies, 50), 3),
            "p99_s": round(percentile(latencies, 99), 3), "max_s": round(max(latencies), 3)}


def stop_daemon(daemon: subprocess.Popen, grace: float) -> None:
    """SIGTERM, `grace` seconds to finish the tick and hand its leases back, then SIGKILL."""
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()


def leave_nothing_behind(data_dir: Path) -> None:
    """The daemon leaves crawlers (and their Redis) running by design; the bench does not."""
    from archiver.conf import Settings
    from runner.launchers import DockerLauncher, LocalLauncher
    from runner.redis_server import EmbeddedRedis

    settings = Settings(data_dir=data_dir, host_rate=0.0)
    for launcher in (LocalLauncher(settings), DockerLauncher(settings)):
        try:
            for instance in launcher.list():
                launcher.remove(instance.ref)
        except Exception as exc:  # noqa: BLE001 - no engine: nothing of ours on it
            print(f"clean-up with {launcher.name}: {exc}", file=sys.stderr)
        launcher.close()
    EmbeddedRedis(settings).stop()
    shutil.rmtree(data_dir, ignore_errors=True)


# --- 2. tick cost --------------------------------------------------------------------------


def measure_tick(active: int, ticks: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="abench-", dir="/tmp"))
    redis_dir = data_dir / "redis-test"
    redis_dir.mkdir(parents=True)
    setup_django(data_dir, ARCHIVER_LOG_LEVEL="WARNING")
    from tests.ports import free_port

    port = free_port()
    redis_proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no", "--databases", "256",
                                   "--dir", str(redis_dir)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _tick_cost(data_dir, port, active, ticks)
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)


def _tick_cost(data_dir: Path, port: int, active: int, ticks: int) -> dict:
    import datetime as dt

    import redis
    from django.utils import timezone

    from archiver.conf import Settings
    from crawls.config import CrawlConfig
    from crawls.models import Crawl, CrawlStatus, Org
    from runner.daemon import Runner
    from runner.launchers import hostname
    from runner.progress import ProgressStore
    from runner.redis_server import RedisEndpoint
    from tests.fakes import FakeLauncher

    for _ in range(100):
        try:
            redis.Redis(port=port).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    org = Org.objects.get_or_create(slug="default")[0]
    config = CrawlConfig(seeds=["http://127.0.0.1:9/"]).model_dump(mode="json")
    now = timezone.now()

    def add_finished(count: int) -> None:
        batch = []
        for i in range(count):
            batch.append(Crawl(org=org, seeds=config["seeds"], config=config, status=CrawlStatus.COMPLETE,
                               retry_at=None, created_at=now - dt.timedelta(days=30, seconds=i),
                               finished_at=now - dt.timedelta(days=29), pages_done=10, pages_found=10))
            if len(batch) == 5000:
                Crawl.objects.bulk_create(batch)
                batch = []
        Crawl.objects.bulk_create(batch)

    settings = Settings(data_dir=data_dir, max_concurrent_crawls=active, poll_interval=1, lease_seconds=30, host_rate=0.0)
    store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=port, databases=256))
    launcher = FakeLauncher()
    runner = Runner(settings, launcher, store, host_check=lambda crawl: None)
    runner.register(now)
    add_finished(1000)
    crawls = [Crawl.create(org, CrawlConfig(**config), now=now) for _ in range(active)]
    runner.tick(now)
    for crawl in crawls:  # what the crawlers would have written
        crawl.refresh_from_db()
        client = store.client(crawl.redis_db)
        client.set(f"{crawl.pk}:d", 5)
        client.sadd(f"{crawl.pk}:s", *[f"u{i}" for i in range(9)])
        client.hset(f"{crawl.pk}:status", hostname(crawl.pk, 0), "running")
        client.hset(f"{crawl.pk}:size", hostname(crawl.pk, 0), 12345)
    assert len(runner.held) == active, len(runner.held)

    def timed(label: str) -> dict:
        samples, cpu = [], []
        for i in range(ticks):
            moment = timezone.now()
            started, started_cpu = time.perf_counter(), time.process_time()
            runner.tick(moment)
            samples.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
            if i % 10 == 0:  # some progress now and then, so writes are part of the cost
                for crawl in crawls[: active // 5]:
                    store.client(crawl.redis_db).incr(f"{crawl.pk}:d")
        return {"finished_crawls": label, "median_ms": round(statistics.median(samples), 2),
                "p90_ms": round(percentile(samples, 90), 2),
                "median_cpu_ms": round(statistics.median(cpu), 2)}

    timed("warm-up")
    small = timed("1,000")
    add_finished(99_000)
    gc.collect()  # the 99,000 rows we just built in Python are garbage now
    timed("warm-up")
    large = timed("100,000")
    # Wall time moves with the machine's load (other processes); the runner's own CPU time
    # per tick is the steadier measure of whether the tick grows with the table.
    return {"active": active, "ticks": ticks, "small": small, "large": large,
            "ratio": round(large["median_ms"] / small["median_ms"], 3),
            "cpu_ratio": round(large["median_cpu_ms"] / small["median_cpu_ms"], 3),
            "load_average": round(os.getloadavg()[0], 2)}


# --- the report ----------------------------------------------------------------------------


def docker_ready() -> bool:
    try:
        import docker

        from archiver.conf import default_crawler_image

        client = docker.from_env(timeout=5)
        client.ping()
        client.images.get(os.environ.get("ARCHIVER_CRAWLER_IMAGE", default_crawler_image()))
        client.close()
    except Exception:  # noqa: BLE001 - any failure means "no Docker here"
        return False
    return True


def run_child(*args: str) -> dict:
    result = subprocess.run([sys.executable, __file__, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=1800)
    if result.returncode != 0:
        return {"error": (result.stderr or result.stdout).strip().splitlines()[-1:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--crawls", type=int, default=20)
    parser.add_argument("--active", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--measure", choices=["start", "tick"], help=argparse.SUPPRESS)
    parser.add_argument("--launcher", default="local", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.measure == "start":
        print(json.dumps(measure_start(args.launcher, args.crawls)))
        return
    if args.measure == "tick":
        print(json.dumps(measure_tick(args.active, args.ticks)))
        return

    sys.path.insert(0, str(ROOT))
    launchers = ["local"] + (["docker"] if docker_ready() else [])
    report = {
        "start": [run_child("--measure", "start", "--launcher", name, "--crawls", str(args.crawls))
                  for name in launchers],
        "tick": run_child("--measure", "tick", "--active", str(args.active), "--ticks", str(args.ticks)),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for row in report["start"]:
        if "error" in row:
            print(f"add -> running: error {row['error']}")
        else:
            print(f"add -> running ({row['launcher']}, {row['crawls']} crawls): "
                  f"p50 {row['p50_s'] * 1000:.0f} ms, p99 {row['p99_s'] * 1000:.0f} ms")
    tick = report["tick"]
    if "error" in tick:
        print(f"tick: error {tick['error']}")
    else:
        print(f"tick with {tick['active']} active crawls: {tick['small']['median_ms']} ms with 1,000 "
              f"finished crawls, {tick['large']['median_ms']} ms with 100,000 (ratio {tick['ratio']}; "
              f"CPU {tick['small']['median_cpu_ms']} -> {tick['large']['median_cpu_ms']} ms, ratio "
              f"{tick['cpu_ratio']}; load average {tick['load_average']})")


if __name__ == "__main__":
    main()

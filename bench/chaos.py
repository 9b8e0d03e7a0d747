"""Chaos trials against real daemons: `python bench/chaos.py [--trials N] [--quick]`.

1. kill -9 trials: a new user's set-up (one data dir, SQLite, the embedded Redis), two
   crawls at a random scale of 1 to 3, the daemon killed -9 at random times (the first
   within 3 s of the adds) and restarted after a random downtime; with the local launcher
   and, where an engine answers with the crawler image, Docker (alternating).
2. The two-runner trial: two daemons on two data dirs sharing one PostgreSQL database and
   one Redis, 30 crawls, one daemon killed -9 midway and restarted later
   (needs ARCHIVER_TEST_POSTGRES_URL or --postgres-url; skipped otherwise); then the
   two-host trial: the same with every archive in one S3 bucket (moto's server, a real
   process on 127.0.0.1), uploaded by the crawlers and recorded by the runner holding the
   crawl; then two adoption trials on that set-up: one runner killed -9 for good, alone
   (its crawlers go on) or with its crawlers (the host is gone), and the other adopts its
   crawls, hands them over and finishes them.
3. The Redis-kill trial: one crawl of a slow site while its Redis is killed -9 and
   restarted 3 times, with ARCHIVER_MAX_LAUNCH_ATTEMPTS=2.
4. Database outages, on a PostgreSQL cluster of the bench's own (initdb on a free port,
   tests/pg_cluster.py; never the shared server): 3 crawls under way when it is restarted
   (`pg_ctl restart -m fast`), 2 added after; the same with it stopped for 3 s; then
   SIGTERM to a daemon whose database is stopped, timed (`stop_seconds_without_database`,
   target under 10 s; a daemon that did not exit within 60 s counts as incomplete).
5. Docker engine restarts, on a dockerd of the bench's own (tests/chaos/private_engine.py;
   never the shared engine), without live-restore (Docker's default: the engine stops the
   containers, the runner relaunches them) and with it (they run on, the runner finds them
   again): 3 crawls under way when it is stopped and started 3 s later, one added while it
   is down; then SIGTERM to the daemon while it is down, timed
   (`stop_seconds_without_engine`, the slower of the two, target under 10 s), a new daemon
   taking the crawls over (tests/chaos/engine_trial.py).
6. The bucket away (moto's server behind a cuttable TCP proxy, tests/chaos/bucket_trials.py):
   cut while the crawler uploads and restored after two upload failures; cut after the
   upload, before the runner records it, and restored once the crawl waits; gone for good
   (ARCHIVER_STORAGE_GRACE=8: the crawl must end `failed`, cause first, its pages kept); then
   SIGTERM while a crawl waits for it, timed (`stop_seconds_without_bucket`, target under
   10 s).

It prints ONE JSON line: the counts summed over every trial (tests/chaos/harness.py
COUNT_KEYS and EXTRA_KEYS), `skipped` (why a trial did not run), `seconds`, and with
--verbose each trial's own counts on stderr. Target: every count 0 except
webhook_events_duplicated (allowed: docs/webhooks.md documents at-least-once delivery
with the same event id). Exit status 1 when a target count is not 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("ARCHIVER_HOST_RATE", "0")  # local sites, as fast as they answer (docs/crawlers.md)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The trials' crawls fetch over HTTP, as the suite's do (tests/conftest.py): browser mode
# would be chosen wherever a Chromium is found.
os.environ.setdefault("ARCHIVER_CHROMIUM", "none")

from tests import pg_cluster  # noqa: E402
from tests.chaos import private_engine  # noqa: E402
from tests.chaos.bucket_trials import bucket_outage_trial, stop_without_bucket_trial  # noqa: E402
from tests.chaos.engine_trial import engine_restart_trial  # noqa: E402
from tests.chaos.harness import COUNT_KEYS, EXTRA_KEYS, docker_ready  # noqa: E402
from tests.chaos.trials import (  # noqa: E402
    adoption_trial,
    database_restart_trial,
    kill9_trial,
    redis_kill_trial,
    stop_without_database_trial,
    two_runner_trial,
)
from tests.pg import fresh_database, server_url, skip_commit_flush  # noqa: E402
from tests.s3server import MotoMissing, moto_command  # noqa: E402

ALLOWED = {"webhook_events_duplicated", "pages_fetched_twice", "tracebacks", "trials", "crawls"}


def in_temp_root(run, *args, **kwargs) -> dict:
    root = Path(tempfile.mkdtemp(prefix="achaos-", dir="/tmp"))  # short: Unix socket paths
    try:
        return run(root, *args, **kwargs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def postgres_trial(url: str, crawls: int, rng: random.Random, bucket: bool = False) -> dict:
    with fresh_database(url) as database_url:
        skip_commit_flush(database_url)
        return in_temp_root(two_runner_trial, database_url, crawls=crawls, rng=rng,
                            timeout=60 + 2 * crawls, bucket=bucket)


def adoption(url: str, rng: random.Random, host_dies: bool) -> dict:
    with fresh_database(url) as database_url:
        skip_commit_flush(database_url)
        # Slow pages: a page is in flight when the adopter takes over.
        return in_temp_root(adoption_trial, database_url, rng=rng, host_dies=host_dies,
                            crawls=9, pages=21, delay=1.5, timeout=180)


def database_outages() -> tuple[list[tuple[str, dict]], float]:
    """A cluster of the bench's own restarted under a daemon, then stopped for 3 s; then
    SIGTERM to a daemon whose database is stopped: the runs, and the seconds it took to exit."""
    runs = []
    for name, downtime in (("database restarted (pg_ctl restart -m fast)", 0.0),
                           ("database stopped for 3 s", 3.0)):
        with pg_cluster.PrivateCluster.start() as cluster:
            result = in_temp_root(database_restart_trial, cluster, downtime=downtime)
        result.pop("log_tail", None)
        runs.append((name, result))
    with pg_cluster.PrivateCluster.start() as cluster:
        stopped = in_temp_root(stop_without_database_trial, cluster)
    stopped.pop("log")
    stopped["incomplete"] = int(stopped["exit_code"] != 0)  # counted: a daemon that did not exit
    runs.append(("SIGTERM with the database stopped", stopped))
    return runs, stopped["stop_seconds"]


def engine_outages() -> tuple[list[tuple[str, dict]], float]:
    """The engine restarted under a daemon, with and without live-restore: the runs, and the
    longest a daemon took to exit on SIGTERM while the engine was down."""
    runs = []
    for live_restore in (False, True):
        with private_engine.PrivateEngine.start(live_restore=live_restore) as engine:
            result = in_temp_root(engine_restart_trial, engine)
        for key in ("log_tail", "engine_log_lines", "timeline"):
            result.pop(key, None)
        result["incomplete"] += int(result["exit_code_without_engine"] != 0)  # it did not exit
        how = "live-restore" if live_restore else "containers stopped with it"
        runs.append((f"Docker engine restarted ({how})", result))
    return runs, max(result["stop_seconds_without_engine"] for _, result in runs)


def bucket_outages() -> tuple[list[tuple[str, dict]], float]:
    """The bucket cut during the upload, before its record, and for good; then SIGTERM while a
    crawl waits for it: the runs, and the seconds the daemon took to exit."""
    runs = []
    for name, options in (("bucket cut while the crawler uploads", {"moment": "upload"}),
                          ("bucket cut before the runner records", {"moment": "record"}),
                          ("bucket gone for good", {"moment": "upload", "restore": False, "grace": 8})):
        result = in_temp_root(bucket_outage_trial, **options)
        result.pop("log_tail", None)
        if not options.get("restore", True):  # its end must say why, cause first
            result["incomplete"] += int(not result["crawl"]["error"].startswith("the bucket s3://"))
        runs.append((name, result))
    stopped = in_temp_root(stop_without_bucket_trial)
    stopped.pop("log")
    stopped["incomplete"] = int(stopped["exit_code"] != 0)  # counted: a daemon that did not exit
    runs.append(("SIGTERM while a crawl waits for the bucket", stopped))
    return runs, stopped["stop_seconds"]


def outages(skipped: list[str], docker_reason: str | None) -> tuple[list[tuple[str, dict]], dict]:
    """The database, Docker engine and bucket outage trials that can run here: the runs, and
    the seconds a daemon took to exit on SIGTERM with each away (None: not run)."""
    runs, seconds = [], {"database": None, "engine": None, "bucket": None}
    if (why := pg_cluster.missing()) is None:
        database_runs, seconds["database"] = database_outages()
        runs += database_runs
    else:
        skipped.append(f"database outage trials: {why}")
    if (why := private_engine.missing() or docker_reason) is None:
        engine_runs, seconds["engine"] = engine_outages()
        runs += engine_runs
    else:
        skipped.append(f"Docker engine restart trials: {why}")
    if (why := moto_missing()) is None:
        bucket_runs, seconds["bucket"] = bucket_outages()
        runs += bucket_runs
    else:
        skipped.append(f"bucket outage trials: {why}")
    return runs, seconds


def moto_missing() -> str | None:
    try:
        moto_command()
    except MotoMissing as exc:
        return str(exc)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6, help="kill -9 trials (default 6)")
    parser.add_argument("--quick", action="store_true",
                        help="2 kill -9 trials, 10 crawls in the two-runner trial")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--postgres-url", default=server_url(),
                        help="a PostgreSQL server URL (default: ARCHIVER_TEST_POSTGRES_URL)")
    parser.add_argument("--verbose", action="store_true", help="each trial's counts on stderr")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    trials = 2 if args.quick else args.trials
    started = time.monotonic()
    totals: Counter[str] = Counter({key: 0 for key in (*COUNT_KEYS, *EXTRA_KEYS)})
    skipped: list[str] = []
    runs: list[tuple[str, dict]] = []

    docker_reason = docker_ready()
    if docker_reason:
        skipped.append(f"docker kill -9 trials: {docker_reason}")
    for i in range(trials):
        launcher = "docker" if i % 2 and not docker_reason else "local"
        scale = rng.randint(1, 3)
        runs.append((f"kill9 {launcher} scale {scale}",
                     in_temp_root(kill9_trial, launcher=launcher, scale=scale, rng=rng)))
    if args.postgres_url:
        crawls = 10 if args.quick else 30
        runs.append(("two runners on PostgreSQL", postgres_trial(args.postgres_url, crawls, rng)))
        if (why := moto_missing()) is None:
            runs.append(("two hosts sharing a bucket",
                         postgres_trial(args.postgres_url, crawls, rng, bucket=True)))
            for host_dies in (False, True):
                runs.append((f"adoption, {'host' if host_dies else 'daemon'} gone for good",
                             adoption(args.postgres_url, rng, host_dies)))
        else:
            skipped.append(f"two-host trial: {why}")
    else:
        skipped.append("two-runner and two-host trials: no PostgreSQL "
                       "(ARCHIVER_TEST_POSTGRES_URL or --postgres-url)")
    runs.append(("redis kill x3", in_temp_root(redis_kill_trial)))
    outage_runs, stop_seconds = outages(skipped, docker_reason)
    runs += outage_runs

    for name, result in runs:
        for key in totals:
            totals[key] += result.get(key, 0)
        if args.verbose:
            print(json.dumps({"trial": name, **result}, default=str), file=sys.stderr)
    report = {key: totals[key] for key in (*COUNT_KEYS, *EXTRA_KEYS)}
    report.update(seed=seed, skipped=skipped, seconds=round(time.monotonic() - started, 1),
                  stop_seconds_without_database=stop_seconds["database"],
                  stop_seconds_without_engine=stop_seconds["engine"],
                  stop_seconds_without_bucket=stop_seconds["bucket"])
    print(json.dumps(report))
    return 1 if any(report[key] for key in (*COUNT_KEYS, *EXTRA_KEYS) if key not in ALLOWED) else 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())

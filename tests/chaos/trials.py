"""The chaos trials bench/chaos.py runs and tests/chaos/ runs short versions of.

Each returns the audit of `Trial.audit()` (the counts of harness.COUNT_KEYS and EXTRA_KEYS,
plus `details` and a few trial-specific numbers).
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.chaos.harness import (
    FINAL,
    RedisServer,
    SharedBucket,
    Trial,
    chaos_site,
    random_kills,
    wait_for,
)


@contextlib.contextmanager
def two_hosts(root: Path, database_url: str, *, bucket: bool, trees: int, pages: int,
              delay: float) -> Iterator[tuple]:
    """(site, trial, a, b): two data dirs (two hosts) on one PostgreSQL database, one Redis
    and, with `bucket`, one S3 bucket, migrated, their daemons not started yet."""
    redis = RedisServer.start(root / "redis")
    storage = SharedBucket(root / "s3") if bucket else None
    try:
        with chaos_site(trees=trees, pages=pages, delay=delay) as site, \
                Trial(root, database_url=database_url, redis=redis, storage=storage,
                      env={"ARCHIVER_MAX_CONCURRENT_CRAWLS": "3"}) as trial:
            a, b = trial.add_data_dir(), trial.add_data_dir()
            trial.migrate()
            yield site, trial, a, b
    finally:
        redis.stop()
        if storage:
            storage.stop()


def two_runner_trial(root: Path, database_url: str, *, crawls: int = 30, pages: int = 4,
                     delay: float = 0.05, downtime: float = 6.0, timeout: float = 75,
                     rng: random.Random | None = None, webhook_wait: float = 20,
                     bucket: bool = False) -> dict:
    """Two daemons on two data dirs, one PostgreSQL database, one Redis (and with `bucket`,
    one S3 bucket that both keep their archives in: the two-host set-up); `crawls` crawls of
    their own small site trees; one daemon killed -9 midway and restarted `downtime` s later
    (past its lease, so the other may adopt its crawls meanwhile)."""
    rng = rng or random.Random()
    with two_hosts(root, database_url, bucket=bucket, trees=crawls, pages=pages,
                   delay=delay) as (site, trial, a, b):
        for data_dir in (a, b):
            trial.start_daemon(data_dir)
        for data_dir in (a, b):
            trial.daemon_ready(data_dir)
        half = crawls // 2
        ids = trial.add_many(a, [site.tree_url(k) for k in range(half)])
        ids += trial.add_many(b, [site.tree_url(k) for k in range(half, crawls)])
        midway = rng.randint(max(1, crawls // 5), max(1, crawls // 2))

        def finals() -> int:
            return sum(status in FINAL for status in trial.statuses(ids).values())

        with contextlib.suppress(AssertionError):  # kill anyway: slower is still midway
            wait_for(lambda: finals() >= midway, min(timeout / 2, 20), 0.2, "midway")
        trial.kill_daemon(a)
        time.sleep(downtime)
        trial.start_daemon(a)
        trial.wait_final(ids, timeout)
        result = trial.audit(site, ids, webhook_wait=webhook_wait)
        result["killed_after_final"] = midway
        return result


def adoption_trial(root: Path, database_url: str, *, crawls: int = 12, pages: int = 8,
                   delay: float = 0.3, host_dies: bool = True, timeout: float = 120,
                   rng: random.Random | None = None, webhook_wait: float = 10) -> dict:
    """Two hosts sharing one PostgreSQL database, one Redis and one S3 bucket; one runner
    killed -9 midway and never restarted (with `host_dies`, its crawlers too, as when the
    host itself goes: what they had not uploaded is gone with it). The other adopts its
    crawls once it is known dead (4 leases of 5 s), hands them over and continues them."""
    rng = rng or random.Random()
    with two_hosts(root, database_url, bucket=True, trees=crawls, pages=pages,
                   delay=delay) as (site, trial, a, b):
        trial.start_daemon(a)
        trial.daemon_ready(a)
        ids = trial.add_many(a, [site.tree_url(k) for k in range(crawls)])
        wait_for(lambda: trial.held_by(a) >= 3, 30, 0.1, "a holds 3 crawls")
        trial.start_daemon(b)
        trial.daemon_ready(b)
        time.sleep(rng.uniform(1.0, 3.0))
        trial.kill_daemon(a)
        if host_dies:
            trial.kill_crawlers(a)
        trial.wait_final(ids, timeout)
        result = trial.audit(site, ids, webhook_wait=webhook_wait)
        result["adopted"] = trial.adopted(b)
        return result


def redis_kill_trial(root: Path, *, kills: int = 3, pages: int = 40, delay: float = 0.25,
                     downtime: float = 1.0, timeout: float = 60,
                     max_launch_attempts: int = 2) -> dict:
    """One daemon and one crawl of a slow site; its (persistent) Redis server killed -9 and
    restarted on the same port `kills` times while the crawl runs."""
    redis = RedisServer.start(root / "redis")
    try:
        with chaos_site(trees=1, pages=pages, delay=delay) as site, \
                Trial(root, redis=redis,
                      env={"ARCHIVER_MAX_LAUNCH_ATTEMPTS": str(max_launch_attempts)}) as trial:
            data_dir = trial.add_data_dir()
            trial.migrate()
            trial.start_daemon(data_dir)
            trial.daemon_ready(data_dir)
            crawl_id = trial.add(data_dir, site.tree_url(0))
            done = 2
            for _ in range(kills):
                state = trial.wait_crawl(crawl_id, lambda c, n=done: c["pages_done"] >= n
                                         or c["status"] in FINAL, timeout=30)
                if state["status"] in FINAL:
                    break
                redis.kill9()
                trial.note(f"kill -9 redis at pages_done={state['pages_done']}")
                time.sleep(downtime)
                redis.restart()
                done = state["pages_done"] + 3
            trial.wait_final([crawl_id], timeout)
            result = trial.audit(site, [crawl_id])
            result["redis_kills"] = redis.kills
            result["status"] = trial.crawl(crawl_id)
            return result
    finally:
        redis.stop()


def kill9_trial(root: Path, *, launcher: str, scale: int, rng: random.Random, crawls: int = 2,
                pages: int = 40, delay: float = 0.15, timeout: float = 120) -> dict:
    """A new user's set-up (SQLite and the embedded Redis in one data dir), `crawls` crawls
    at `scale`, the daemon killed -9 at random times (the first within 3 s of the adds) and
    restarted after a random downtime."""
    with chaos_site(trees=crawls, pages=pages, delay=delay) as site, \
            Trial(root, launcher=launcher, env={"ARCHIVER_MAX_CONCURRENT_CRAWLS": str(crawls)}) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        trial.start_daemon(data_dir)
        ids = [trial.add(data_dir, site.tree_url(k), "--scale", str(scale)) for k in range(crawls)]

        def all_final() -> bool:
            return all(status in FINAL for status in trial.statuses(ids).values())

        kills = random_kills(trial, data_dir, rng, all_final)
        trial.wait_final(ids, timeout)
        result = trial.audit(site, ids)
        result["daemon_kills"] = kills
        return result


OUTAGE_WORDS = ("database", "connection")


def outage_lines(trial: Trial) -> int:
    """Lines of the daemons' logs about the database or its connection (an outage logged
    once when it starts, at most once a minute while it lasts, once when it ends)."""
    return sum(1 for path in trial.logs if path.exists()
               for line in path.read_text(errors="replace").splitlines()
               if any(word in line.lower() for word in OUTAGE_WORDS))


def database_restart_trial(root: Path, cluster, *, crawls: int = 3, later: int = 2,
                           pages: int = 12, delay: float = 0.3, downtime: float = 0.0,
                           timeout: float = 60) -> dict:
    """One daemon on a PostgreSQL cluster of the trial's own (tests/pg_cluster.py), `crawls`
    crawls of a slow site; the database restarted (`pg_ctl restart -m fast`, or stopped for
    `downtime` s) mid-crawl, then `later` crawls added: all must complete, every page once."""
    with chaos_site(trees=crawls + later, pages=pages, delay=delay) as site, \
            Trial(root, database_url=cluster.url,
                  env={"ARCHIVER_MAX_CONCURRENT_CRAWLS": str(crawls + later)}) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        trial.start_daemon(data_dir)
        trial.daemon_ready(data_dir)
        ids = trial.add_many(data_dir, [site.tree_url(k) for k in range(crawls)])
        for crawl_id in ids:
            trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 1 or c["status"] in FINAL,
                             timeout=30)
        before = {i: trial.crawl(i)["status"] for i in ids}
        if downtime:
            cluster.stop()
            trial.note("database stopped")
            time.sleep(downtime)
            cluster.start_again()
        else:
            cluster.restart()
        trial.note("database restarted")
        ids += trial.add_many(data_dir, [site.tree_url(k) for k in range(crawls, crawls + later)])
        trial.wait_final(ids, timeout)
        result = trial.audit(site, ids, webhook_wait=10)
        result["outage_lines"] = outage_lines(trial)
        result["running_at_restart"] = sum(s == "running" for s in before.values())
        result["daemon_alive"] = data_dir.daemon.poll() is None
        if result["incomplete"] or result["tracebacks"]:
            result["log_tail"] = trial.log_tail(4000)
        return result


def stop_without_database_trial(root: Path, cluster, signum: int = signal.SIGTERM,
                                timeout: float = 60) -> dict:
    """One daemon on the trial's own PostgreSQL cluster, one crawl under way; the database
    stopped, then the daemon signalled: how long it took to exit (docs/runner.md: 10 s)."""
    with chaos_site(trees=1, pages=40, delay=0.3) as site, \
            Trial(root, database_url=cluster.url) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        daemon = trial.start_daemon(data_dir)
        trial.daemon_ready(data_dir)
        crawl_id = trial.add(data_dir, site.tree_url(0))
        trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 1, timeout=30)
        cluster.stop()
        wait_for(lambda: "the database is unavailable" in trial.log_tail(100_000), 30, 0.1,
                 "the daemon saw the outage")
        daemon.send_signal(signum)
        started = time.monotonic()
        try:
            code = daemon.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        log = trial.log_tail(1_000_000)
        return {"exit_code": code, "stop_seconds": round(time.monotonic() - started, 2),
                "tracebacks": trial.tracebacks(), "log": log,
                "outage_lines": outage_lines(trial)}


ADOPTION_KEYS = ("incomplete", "pages_twice", "pages_missing", "archives_unrecorded",
                 "files_missing", "wacz_invalid", "tracebacks")


def check_adoption(result: dict) -> None:
    """What tests/chaos/test_adoption*.py assert of adoption_trial's result."""
    counts = {key: result[key] for key in ADOPTION_KEYS}
    assert counts == dict.fromkeys(ADOPTION_KEYS, 0), result
    assert result["adopted"] >= 1, result  # the trial did what it is about


def check_two_runners(result: dict, crawls: int = 30) -> None:
    """What tests/chaos/test_two_runners.py and test_two_hosts_bucket.py assert."""
    counts = {key: result[key] for key in ("incomplete", "crawled_twice", "pages_twice",
                                           "archives_unrecorded", "pages_missing",
                                           "files_missing", "wacz_invalid")}
    assert counts == dict.fromkeys(counts, 0), result
    assert result["crawls"] == crawls

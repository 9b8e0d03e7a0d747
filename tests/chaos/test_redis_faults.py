"""Redis faults under a real daemon: restarts mid-crawl, death while idle, corrupt keys."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.chaos.harness import FINAL, RedisServer, Trial, chaos_site
from tests.chaos.trials import redis_kill_trial
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def test_redis_killed_three_times_mid_crawl_the_crawl_completes_with_each_page_once(chaos_root):
    result = redis_kill_trial(chaos_root, kills=3, pages=40, delay=0.25, timeout=60,
                              max_launch_attempts=2)
    assert result["incomplete"] == 0, (result["status"], result["redis_kills"])
    assert result["redis_kills"] == 3, result  # else the site is too fast for this test
    assert (result["pages_missing"], result["wacz_invalid"]) == (0, 0), result
    # Outcomes Redis could not take (also those of workers cancelled while their commit
    # waited) are journaled and recorded by the next session: no page is archived twice.
    assert result["pages_twice"] == 0, result


def test_an_embedded_redis_killed_while_idle_is_back_for_the_next_add(chaos_root):
    with chaos_site(trees=1, pages=4) as site, Trial(chaos_root, webhooks=False) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        trial.start_daemon(data_dir)
        trial.daemon_ready(data_dir)
        state = wait_for(data_dir.embedded_redis, 60, what="run/redis.json")
        os.kill(state["pid"], signal.SIGKILL)
        time.sleep(3)  # idle ticks with Redis dead

        crawl_id = trial.add(data_dir, site.tree_url(0))
        trial.wait_final([crawl_id], timeout=30)
        result = trial.audit(site, [crawl_id])
    assert trial.crawl(crawl_id)["status"] == "complete", trial.crawl(crawl_id)
    assert (result["pages_missing"], result["pages_twice"]) == (0, 0), result


def corrupt(redis: RedisServer, crawl_id: str, key: str, value: str) -> None:
    """SET `<crawl_id>:<key>` to `value` in whichever database holds the crawl's state."""
    db = wait_for(lambda: redis.find_db(f"{crawl_id}:s"), 20, what=f"{crawl_id[:8]} in Redis")
    redis.client(db).call("SET", f"{crawl_id}:{key}", value)


def test_corrupt_progress_keys_fail_the_crawl_readably_in_bounded_time(chaos_root):
    redis = RedisServer.start(chaos_root / "redis")
    try:
        with chaos_site(trees=2, pages=60, delay=0.3) as site, \
                Trial(chaos_root, redis=redis, webhooks=False) as trial:
            data_dir = trial.add_data_dir()
            trial.migrate()
            trial.start_daemon(data_dir)
            trial.daemon_ready(data_dir)
            counter = trial.add(data_dir, site.tree_url(0))
            wrong_type = trial.add(data_dir, site.tree_url(1))
            for crawl_id in (counter, wrong_type):
                trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 2, timeout=30)
            corrupt(redis, counter, "d", "abc")  # pages done: not a number
            corrupt(redis, wrong_type, "status", "running")  # a hash made a string
            corrupted = time.monotonic()

            statuses = trial.wait_final([counter, wrong_type], timeout=60)
            took = time.monotonic() - corrupted
            tracebacks = trial.tracebacks()
            time.sleep(3)  # a few more ticks: no new traceback once the crawls ended
            tracebacks_later = trial.tracebacks()
            states = {crawl_id: trial.crawl(crawl_id) for crawl_id in (counter, wrong_type)}
    finally:
        redis.stop()
    assert all(s in FINAL for s in statuses.values()), (f"not final {took:.0f} s after", states,
                                                        f"{tracebacks} tracebacks")
    assert states[counter]["status"] == "failed", states[counter]
    assert ":d" in states[counter]["error"] or "abc" in states[counter]["error"], states[counter]
    assert states[wrong_type]["status"] == "failed", states[wrong_type]
    error = states[wrong_type]["error"]
    assert ":status" in error or "wrong" in error.lower(), error
    assert "unreachable" not in (states[counter]["error"] + error).lower(), states
    assert tracebacks <= 4, f"{tracebacks} tracebacks in the daemon's log"
    assert tracebacks_later == tracebacks, "tracebacks go on after the crawls ended"

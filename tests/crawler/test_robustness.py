"""What must never hang, crash without a word, or leave work behind: cancels that are not
delivered, a silent Redis, stuck threads, a busy health port, unexpected errors, instances
starting together, and pages held by instances that are gone."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import archiver_crawler.cli as cli
import archiver_crawler.crawl as crawl_module
import archiver_crawler.page as page_module
import archiver_crawler.state as state_module
import pytest
from archiver_crawler.cli import RedisErrorBuffer, exit_code_of, run_bounded, run_instance
from archiver_crawler.config import parse_args
from archiver_crawler.fetch import Fetcher
from archiver_crawler.output import PagesFile
from archiver_crawler.state import CrawlState, Outcome, QueueEntry
from archiver_crawler.warc import iso_now

from tests.crawler.running import base_args
from tests.ports import free_port, refused_port
from tests.waiting import HANG, wait_for

INSTANCE = "crawl-crawl1-0"
GONE = "crawl-crawl1-7"
LONG_AGO = "2000-01-01T00:00:00.000Z"


def config_for(url: str, redis_url: str, tmp_path, *extra: str):
    return parse_args(base_args(url, redis_url, tmp_path, *extra),
                      env={"CRAWLER_HOSTNAME": INSTANCE})


def hold_in_progress(r, url: str, owner: str, started: str = LONG_AGO) -> None:
    """A page in `:p` as an instance that claimed it and never came back leaves it."""
    r.sadd("crawl1:s", url)
    r.hset("crawl1:p", url, json.dumps({"url": url, "seedId": 0, "depth": 1, "extraHops": 0,
                                        "owner": owner, "started": started}))


# 1. cancel


def test_a_cancel_ends_the_instance_even_when_a_page_ignores_its_cancellation(
        redis_url, tmp_path, site, r, monkeypatch):
    monkeypatch.setattr(crawl_module, "TASK_GRACE", 0.5)
    monkeypatch.setattr(cli, "SHUTDOWN_GRACE", 0.5)
    fetch = Fetcher.fetch

    async def stubborn(self, url):
        if url.endswith("/site/slow.html"):
            r.set("crawl1:canceled", "1")
            # Far longer than the bound below: the instance must not wait for it.
            deadline = time.monotonic() + 2 * HANG
            while time.monotonic() < deadline:
                try:
                    await asyncio.sleep(deadline - time.monotonic())
                except asyncio.CancelledError:
                    continue  # what a cancellation absorbed by a library looks like
        return await fetch(self, url)

    monkeypatch.setattr(Fetcher, "fetch", stubborn)
    config = config_for(site.url, redis_url, tmp_path, "--workers", "2", "--generateWACZ",
                        "--logErrorsToRedis")
    started = time.monotonic()
    assert run_bounded(run_instance(config, RedisErrorBuffer())) == 0
    assert time.monotonic() - started < HANG
    assert r.hget("crawl1:status", INSTANCE) == "canceled"
    assert not (tmp_path / "collections" / "coll" / "coll.wacz").exists()


# 2. nothing waits forever


def test_a_redis_that_never_answers_exits_8_in_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setattr(state_module, "CONNECT_TIMEOUT", 0.3)
    monkeypatch.setattr(state_module, "COMMAND_TIMEOUT", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog; nothing ever answers
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        config = config_for("http://127.0.0.1:9/", url, tmp_path)
        started = time.monotonic()
        assert exit_code_of(config, RedisErrorBuffer(), started) == 8
    assert time.monotonic() - started < HANG  # an upper bound, not a timing: it never answers


def test_a_thread_that_never_ends_does_not_keep_the_process_alive():
    script = textwrap.dedent("""
        import threading, time
        from archiver_crawler import cli
        cli.SHUTDOWN_GRACE = 0.2
        threading.Thread(target=time.sleep, args=(60,), name="stuck-lookup").start()
        raise SystemExit(cli._leave(7))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=20)
    assert done.returncode == 7
    assert "stuck-lookup" in done.stderr


def test_a_busy_health_check_port_is_reported_and_the_crawl_goes_on(spawn, site, r):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        crawler = spawn(site.url, "--healthCheckPort", str(taken.getsockname()[1]))
        assert crawler.wait() == 0
    assert "health check port" in crawler.stderr
    assert crawler.collection.page_urls == site.expected_pages()


def test_a_silent_health_check_client_does_not_hold_the_instance(spawn, big_site, r):
    port = free_port()
    big_site.hold()
    crawler = spawn(big_site.url, "--healthCheckPort", str(port))
    wait_for(lambda: r.hget("crawl1:status", INSTANCE) == "running")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        big_site.release()  # the prober says nothing and keeps its connection open
        assert crawler.wait() == 0


def test_restarts_on_error_keeps_the_exit_codes_so_the_runner_relaunches(tmp_path):
    with refused_port() as port:
        done = subprocess.run(
            [str(cli_path()), "--url", "http://127.0.0.1:9/", "--cwd", str(tmp_path),
             "--restartsOnError", "--redisStoreUrl", f"redis://127.0.0.1:{port}/0"],
            capture_output=True, text=True, timeout=30)
    assert done.returncode == 8


def cli_path():
    from tests.crawler.running import CRAWLER

    return CRAWLER


# 3. unexpected errors


def test_an_unexpected_error_exits_1_and_says_why_on_stderr_and_in_redis(spawn, site, r,
                                                                          tmp_path):
    collection = tmp_path / "collections" / "coll"
    collection.mkdir(parents=True)
    (collection / "archive").write_text("a file where the WARC directory should be")
    crawler = spawn(site.url, "--logErrorsToRedis")
    assert crawler.wait() == 1
    assert "unexpected error, exiting 1: FileExistsError" in crawler.stderr
    errors = [json.loads(line) for line in r.lrange("crawl1:e", 0, -1)]
    fatal = [e for e in errors if e["message"].startswith("unexpected error")]
    assert fatal and fatal[0]["details"]["type"] == "FileExistsError"
    assert r.hget("crawl1:status", INSTANCE) == "interrupted"
    assert r.hlen("crawl1:p") == 0  # its page went back to the queue


def test_a_page_that_breaks_the_parser_fails_alone(crawl, site, r, monkeypatch):
    extract = page_module.extract_html

    def broken_on_b(body, url):
        if url.endswith("/site/b.html"):
            raise ValueError("parser bug")
        return extract(body, url)

    monkeypatch.setattr(page_module, "extract_html", broken_on_b)
    code, coll = crawl(site.url)
    assert code == 0
    failed = {json.loads(f)["url"]: json.loads(f)["reason"] for f in r.lrange("crawl1:f", 0, -1)}
    assert failed == {site.root + "/site/b.html": "internal error: ValueError: parser bug"}
    assert coll.page_urls == site.expected_pages() - {site.root + "/site/b.html",
                                                      site.root + "/site/b1.html"}


def test_instances_starting_together_write_one_header_and_every_line(tmp_path):
    path = tmp_path / "pages" / "pages.jsonl"
    starting = threading.Barrier(8)

    def instance(i: int) -> None:
        starting.wait()
        pages = PagesFile(path)
        pages.append(json.dumps({"id": i}))
        pages.close()

    threads = [threading.Thread(target=instance, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["format"] == "json-pages-1.0"
    assert sorted(line["id"] for line in lines[1:]) == list(range(8))
    assert list(path.parent.iterdir()) == [path]


# 4. pages in progress


@pytest.mark.parametrize("status", [None, "done", "canceled", "failed"])
def test_pages_left_by_an_instance_gone_for_good_are_taken_back(crawl, site, r, status):
    orphan = site.root + "/site/c.html"
    hold_in_progress(r, orphan, GONE)
    if status:
        r.hset("crawl1:status", GONE, status)
    code, coll = crawl(site.url, "--depth", "0")
    assert code == 0
    assert coll.page_urls == {site.url, orphan}
    assert r.hlen("crawl1:p") == 0 and int(r.get("crawl1:d")) == 2


def test_pages_of_a_live_instance_are_waited_for(spawn, site, r):
    orphan = site.root + "/site/c.html"
    hold_in_progress(r, orphan, GONE)
    r.hset("crawl1:status", GONE, "running")
    crawler = spawn(site.url, "--depth", "0")
    wait_for(lambda: r.hget("crawl1:status", INSTANCE) == "pending-wait")
    assert r.hexists("crawl1:p", orphan) and crawler.proc.poll() is None
    r.hset("crawl1:status", GONE, "done")
    assert crawler.wait() == 0
    assert orphan in crawler.collection.page_urls


def test_a_recent_claim_of_a_gone_instance_is_taken_back_only_after_the_grace(
        crawl, site, r, monkeypatch):
    monkeypatch.setattr(crawl_module, "ORPHAN_GRACE", 1.0)
    orphan = site.root + "/site/c.html"
    hold_in_progress(r, orphan, GONE, started=iso_now())
    claimed = time.monotonic()
    code, coll = crawl(site.url, "--depth", "0")
    assert code == 0 and orphan in coll.page_urls
    assert time.monotonic() - claimed >= 0.9


def test_a_scaled_down_instance_hands_back_pages_it_holds_but_has_not_finished(
        spawn, big_site, r):
    big_site.hold()
    crawler = spawn(big_site.url, "--workers", "2")
    wait_for(lambda: r.hget("crawl1:status", INSTANCE) == "running")
    abandoned = big_site.root + "/gen/p40.html"
    hold_in_progress(r, abandoned, INSTANCE, started=iso_now())  # no worker has it
    r.hset("crawl1:stopone", INSTANCE, "1")
    big_site.release()
    assert crawler.wait() == 0
    assert r.hget("crawl1:status", INSTANCE) == "done"
    assert not r.hexists("crawl1:p", abandoned)
    assert abandoned in [json.loads(m)["url"] for m in r.zrange("crawl1:q", 0, -1)]


def test_the_outcome_of_a_page_taken_back_counts_once(redis_url):
    url = "http://127.0.0.1:9/page.html"

    async def scenario():
        gone = await CrawlState.connect(redis_url, "crawl1", GONE)
        live = await CrawlState.connect(redis_url, "crawl1", INSTANCE)
        try:
            await gone.add([QueueEntry(url=url, seed_id=0, depth=0)], 0)
            assert (await gone.commit(None, 0, LONG_AGO)).claimed.url == url
            await gone.set_status("done")  # as a runner that gave up on it leaves it
            assert (await live.settle(iso_now())).requeued == 1
            assert (await live.commit(None, 0, iso_now())).claimed.url == url
            late = await gone.commit(Outcome(url, page="{}"), 0, None)
            on_time = await live.commit(Outcome(url, page="{}"), 0, None)
            assert (late.recorded, on_time.recorded) == (False, True)
            assert await live.done_count() == 1
            assert (await live.settle(iso_now())).finished
        finally:
            await gone.close()
            await live.close()

    asyncio.run(scenario())


def test_a_signal_received_while_the_crawler_was_still_importing_stops_it(crawl, site, r,
                                                                           monkeypatch):
    from archiver_crawler import stop

    # What launch.main() recorded: as PID 1 the signal would otherwise have been ignored.
    monkeypatch.setattr(stop, "received", [signal.SIGTERM])
    code, coll = crawl(site.url, "--generateWACZ")
    assert code == 11
    assert r.hget("crawl1:status", INSTANCE) == "interrupted"
    assert sum(site.requests.values()) == 0 and not coll.pages


def test_the_console_script_catches_signals_before_its_slow_imports():
    script = textwrap.dedent("""
        import signal, sys
        from archiver_crawler import launch, stop
        sys.modules["archiver_crawler.cli"] = None  # stop right after the handlers are set
        try:
            launch.main()
        except ImportError:
            print(all(signal.getsignal(s) is stop.remember for s in stop.STOP_SIGNALS))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=20)
    assert done.stdout.strip() == "True"

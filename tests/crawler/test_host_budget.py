"""One politeness per host for every crawl (issue 42): the shared request budget, the pause a
429 asks for, and the breaker of a host that keeps failing. Real crawler processes, a real
Redis, real HTTP servers on 127.0.0.1; the host counts what reaches it and when."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from archiver_crawler.errors import ConfigError
from archiver_crawler.hosts import (
    BREAKER_FAILS,
    MAX_CRAWL_DELAY,
    MAX_PAUSE,
    MAX_RETRIES,
    PAUSE_DEFAULT,
    HostBudget,
    Rates,
    host_options,
    retry_after,
    shared_url,
)

from tests.crawler.running import CRAWLER, base_args
from tests.sitegen import Response, serve_site


class Clocked:
    """When each request reached the site (monotonic seconds), its path and User-Agent."""

    def __init__(self, site):
        self.site = site
        self.times: list[tuple[float, str]] = []
        self.agents: list[str] = []
        self._lock = threading.Lock()
        original = site.count

        def count(path: str, agent: str) -> None:
            with self._lock:
                self.times.append((time.monotonic(), path))
                self.agents.append(agent)
            original(path, agent)

        site.count = count

    def most_in(self, window: float) -> int:
        stamps = sorted(t for t, _ in self.times)
        return max((sum(1 for s in stamps[i:] if s - t < window) for i, t in enumerate(stamps)),
                   default=0)


class Crawls:
    """Crawler processes, each a crawl of its own (its own id and Redis database)."""

    def __init__(self, redis_server, tmp_path: Path):
        self.redis_server = redis_server
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []
        self.dbs: list[int] = []

    def start(self, url: str, name: str, *extra: str) -> Path:
        db = 200 + len(self.procs)  # above the suite's per-test databases' usual range
        redis.Redis.from_url(self.redis_server.url(db)).flushdb()
        cwd = self.tmp_path / name
        self.procs.append(subprocess.Popen(
            [CRAWLER, *base_args(url, self.redis_server.url(db), cwd, "--workers", "4",
                                 "--writePagesToRedis", "--logErrorsToRedis", *extra,
                                 crawl_id=name)],
            env=dict(os.environ, CRAWLER_HOSTNAME=f"crawl-{name}-0"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.dbs.append(db)
        return cwd / "collections" / "coll"

    def wait(self) -> list[int]:
        return [proc.wait(timeout=60) for proc in self.procs]

    def client(self, index: int) -> redis.Redis:
        return redis.Redis.from_url(self.redis_server.url(self.dbs[index]), decode_responses=True)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def crawls(redis_server, tmp_path):
    redis.Redis.from_url(redis_server.url(0)).flushdb()  # the shared key space: no old budget
    started = Crawls(redis_server, tmp_path)
    yield started
    started.stop()


def pages_of(collection: Path) -> list[dict]:
    lines = (collection / "pages" / "pages.jsonl").read_text().splitlines()[1:]
    return [json.loads(line) for line in lines]


def test_two_crawls_of_one_host_share_its_rate(crawls):
    with serve_site(pages=30) as site:
        clock = Clocked(site)
        for name in ("polite1", "polite2"):
            crawls.start(site.url, name, "--hostRate", "2", "--limit", "9", "--userAgent", name)
        assert crawls.wait() == [0, 0]
    # 9 pages and 2 requisites each: 22 requests at 2 a second together, over 10 s.
    assert len(clock.times) == 22
    assert clock.most_in(5.0) <= 12
    # The crawls were under way at once, so they shared the rate rather than took turns.
    spans = [[t for (t, _), agent in zip(clock.times, clock.agents, strict=True)
              if agent == name]
             for name in ("polite1", "polite2")]
    both = (max(s[0] for s in spans), min(s[-1] for s in spans))
    assert all(sum(both[0] <= t <= both[1] for t in span) >= 4 for span in spans)


def test_a_429_pauses_every_crawl_of_the_host_and_its_page_is_archived(crawls):
    asked = threading.Event()
    with serve_site(pages=6) as site:
        clock = Clocked(site)
        plain = site.routes["/gen/p3.html"]
        original = site.count

        def first_429(path: str, agent: str) -> None:
            original(path, agent)
            if path == "/gen/p3.html" and not asked.is_set():
                asked.set()
                site.routes[path] = Response(status=429, body=b"slow down",
                                             content_type="text/plain",
                                             headers={"Retry-After": "2"})
            elif path == "/gen/p3.html":
                site.routes[path] = plain

        site.count = first_429
        first = crawls.start(site.url, "backoff1", "--hostRate", "4")
        second = crawls.start(site.url, "backoff2", "--hostRate", "4")
        assert crawls.wait() == [0, 0]
    answered = next(t for t, path in clock.times if path == "/gen/p3.html")
    during = [path for t, path in clock.times if answered < t < answered + 1.9]
    assert during == []
    for collection in (first, second):
        p3 = [p for p in pages_of(collection) if p["url"].endswith("/gen/p3.html")]
        assert [p["status"] for p in p3] == [200]
    said = [[json.loads(line) for line in crawls.client(i).lrange(f"backoff{i + 1}:e", 0, -1)
             if "is paused until" in line] for i in (0, 1)]
    # In the crawl's log once: by the crawl answered 429, and by the other if it waited.
    assert sorted(len(lines) for lines in said) in ([0, 1], [1, 1])
    assert any("it answered 429" in line["message"] for lines in said for line in lines)
    assert {line["logLevel"] for lines in said for line in lines} == {"warning"}


@contextmanager
def hanging_up_host():
    """A host that accepts connections and closes them without a word: no HTTP response."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(time.monotonic())
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_a_host_that_keeps_failing_trips_the_breaker(crawls):
    with hanging_up_host() as (port, accepted):
        dead = [f"http://127.0.0.1:{port}/p{i}.html" for i in range(12)]
        seed = Response(body=("<html><body>" + "".join(f'<a href="{u}">x</a>' for u in dead)
                              + "</body></html>").encode())
        with serve_site(extra={"/dead-links.html": seed}) as site:
            crawls.start(site.root + "/dead-links.html", "breaker1", "--scopeType", "any",
                         "--depth", "1", "--workers", "2")
            assert crawls.wait() == [0]
    failed = [json.loads(line)["reason"] for line in crawls.client(0).lrange("breaker1:f", 0, -1)]
    assert len(failed) == 12
    down = [reason for reason in failed if f"host 127.0.0.1:{port} is down" in reason]
    assert len(down) >= 12 - (BREAKER_FAILS + 2)  # 2 workers: one more may have been under way
    # aiohttp tries a request again once on a fresh connection when the server hangs up.
    assert len(accepted) <= 2 * (BREAKER_FAILS + 1)


# the parts, without a crawl


def test_retry_after_is_read_as_seconds_or_a_date_and_bounded():
    assert retry_after("3") == 3.0
    assert retry_after(None) == PAUSE_DEFAULT
    assert retry_after("soon") == PAUSE_DEFAULT
    assert retry_after("999999") == MAX_PAUSE
    assert retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412500.0) == 0.0


def test_a_host_pattern_sets_its_hosts_rate_and_others_keep_the_default():
    rates = host_options({"hostRate": "2", "hostRates": ["*.example.org=0.5,slow.test=0"]})["rates"]
    assert rates == Rates(2.0, (("*.example.org", 0.5), ("slow.test", 0.0)))
    assert rates.of("www.example.org") == 0.5
    assert rates.of("slow.test:8080") == 0.0
    assert rates.of("example.com") == 2.0


@pytest.mark.parametrize("options", [{"hostRate": "-1"}, {"hostRate": "fast"},
                                     {"hostRate": "nan"}, {"hostRates": "example.org"},
                                     {"hostRates": "=2"}, {"hostRates": "a b=2"},
                                     {"hostRates": "example.org=lots"}])
def test_a_bad_rate_is_refused(options):
    with pytest.raises(ConfigError):
        host_options(options)


def test_the_shared_key_space_is_database_0_of_the_crawls_server():
    assert shared_url("redis://crawl-x:pw@redis:6379/7") == "redis://crawl-x:pw@redis:6379/0"
    assert shared_url("unix:///run/redis.sock?db=3") == "unix:///run/redis.sock?db=0"


def test_a_host_that_always_asks_to_wait_gets_its_answer_archived_after_the_last_retry(
        redis_url):
    sent = []

    async def always_429() -> tuple[int, str | None]:
        budget = HostBudget.connect(redis_url, Rates())
        try:
            async def send() -> tuple[int, str | None]:
                sent.append(1)
                return 429, "0"

            return await budget.polite("busy.test", send, lambda answer: answer,
                                       lambda _: False)
        finally:
            await budget.close()

    assert asyncio.run(always_429()) == (429, "0")
    assert len(sent) == MAX_RETRIES + 1


def test_a_crawl_delay_lengthens_the_interval_but_never_shortens_it():
    budget = HostBudget(FakeScripts(), Rates(default=2.0))
    budget.crawl_delay("a.test", 3)
    budget.crawl_delay("b.test", 0.1)
    budget.crawl_delay("c.test", 3600)
    assert [budget.interval_ms(h) for h in ("a.test", "b.test", "c.test", "d.test")] == [
        3000, 500, int(MAX_CRAWL_DELAY * 1000), 500]


class FakeScripts:
    """Enough of a client to build a HostBudget whose Redis is never asked."""

    def register_script(self, script: str):
        return None


def test_no_rate_given_is_no_limit():
    assert host_options({})["rates"] == Rates()

"""One instance in several processes (`--processes`, procs.py): the same records as one
process, one instance to the runner, and its stops, controls and dead processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from archiver_crawler import journal
from archiver_crawler.config import available_cpus, parse_args
from archiver_crawler.errors import ConfigError
from archiver_crawler.state import CrawlState, Outcome, QueueEntry
from warcio.archiveiterator import ArchiveIterator

from tests.crawler.wacz_check import wacz_validate
from tests.sitegen import serve_site
from tests.waiting import HANG, wait_for

INSTANCE = "crawl-crawl1-0"
SLOW = ("--hostDelay", "0.04", "--generateWACZ", "--workers", "4", "--processes", "2")


def records(wacz: Path) -> Counter:
    """(type, URL, payload digest) of every response and revisit record in the WACZ; of a
    gzipped response, the digest of its decoded payload (gzip stamps the time it ran)."""
    found: Counter = Counter()
    with zipfile.ZipFile(wacz) as zf:
        for name in zf.namelist():
            if not name.startswith("archive/"):
                continue
            with zf.open(name) as warc:
                for record in ArchiveIterator(warc):
                    if record.rec_type not in ("response", "revisit"):
                        continue
                    digest = record.rec_headers["WARC-Payload-Digest"]
                    if record.http_headers.get_header("Content-Encoding"):
                        digest = hashlib.sha1(record.content_stream().read()).hexdigest()
                    found[(record.rec_type, record.rec_headers["WARC-Target-URI"],
                           digest)] += 1
    return found


def warcs_in(wacz: Path) -> list[str]:
    with zipfile.ZipFile(wacz) as zf:
        return [n for n in zf.namelist() if n.startswith("archive/")]


def children_of(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def pages_done(r) -> int:
    return int(r.get("crawl1:d") or 0)


@pytest.fixture
def large_site():
    """Enough pages that both processes get some before the crawl is over."""
    with serve_site(pages=400) as s:
        yield s


@pytest.mark.parametrize("which", ["site", "large_site"])
def test_two_processes_archive_the_same_records_as_one(which, request, spawn, r, tmp_path):
    served = request.getfixturevalue(which)
    common = ("--generateWACZ", "--workers", "4", "--writePagesToRedis")
    one = spawn(served.url, *common, "--processes", "1", cwd=tmp_path / "one")
    assert one.wait(60) == 0
    one_records, one_pages = records(one.collection.wacz), one.collection.pages
    r.flushdb()
    served.requests.clear()

    two = spawn(served.url, *common, "--processes", "2", cwd=tmp_path / "two")
    assert two.wait(60) == 0
    assert "4 worker(s) in 2 process(es)" in two.collection.log_text
    # One instance to the runner: one status, one size, and no page left held.
    assert r.hgetall("crawl1:status") == {INSTANCE: "done"}
    assert list(r.hgetall("crawl1:size")) == [INSTANCE]
    assert r.hlen("crawl1:p") == 0
    assert wacz_validate(two.collection.wacz).returncode == 0
    if which == "large_site":
        assert len(warcs_in(two.collection.wacz)) == 2  # each process wrote its own WARC
    assert records(two.collection.wacz) == one_records
    assert sorted(p["url"] for p in two.collection.pages) == sorted(p["url"] for p in one_pages)
    assert int(r.get("crawl1:d")) == r.llen("crawl1:pages") == len(one_pages)
    assert max(served.requests.values()) == 1  # no URL fetched twice
    size = int(r.hget("crawl1:size", INSTANCE))
    archive = two.collection.dir / "archive"
    assert size >= sum(p.stat().st_size for p in archive.glob("*.warc.gz"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_process_gracefully_and_a_relaunch_finishes(sig, spawn, big_site,
                                                                        r):
    first = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 4)
    first.proc.send_signal(sig)  # to the parent only, as `docker stop` sends it
    assert first.wait() == 11  # interrupted: the relaunch goes on
    assert r.hgetall("crawl1:status") == {INSTANCE: "interrupted"}
    assert r.hlen("crawl1:p") == 0  # pages in flight were finished, none left held
    stopped_at = len(first.collection.pages)
    assert 4 <= stopped_at < len(big_site.expected_pages())
    assert r.zcard("crawl1:q") > 0
    assert wacz_validate(first.collection.wacz).returncode == 0

    second = spawn(big_site.url, *SLOW)
    assert second.wait() == 0
    assert r.hgetall("crawl1:status") == {INSTANCE: "done"}
    assert second.collection.page_urls == big_site.expected_pages()
    assert len(second.collection.pages) == len(big_site.expected_pages())
    assert set(big_site.requests.values()) == {1}
    assert wacz_validate(second.collection.wacz).returncode == 0


def test_a_second_signal_abandons_every_process_pages_and_hands_them_back(spawn, r):
    with serve_site(pages=40) as site:
        for path, response in site.routes.items():
            if path.startswith("/gen/p"):
                response.delay = 2 * HANG  # in flight in both processes when the signals come
        crawler = spawn(site.url, "--workers", "4", "--processes", "2", "--generateWACZ")
        wait_for(lambda: len({json.loads(v)["owner"] for v in r.hvals("crawl1:p")}) == 2)
        crawler.proc.send_signal(signal.SIGINT)
        # Two signals sent before the first is handled are merged into one by the kernel.
        wait_for(lambda: "stopping: signal" in crawler.collection.log_text)
        started = time.monotonic()
        crawler.proc.send_signal(signal.SIGINT)
        assert crawler.wait() == 13
        # The pages in flight were not waited for: they would answer after twice this bound.
        assert time.monotonic() - started < HANG
    assert r.hgetall("crawl1:status") == {INSTANCE: "interrupted"}
    assert r.hlen("crawl1:p") == 0 and r.zcard("crawl1:q") >= 2  # abandoned, handed back
    assert not crawler.collection.wacz.exists()


def test_a_stop_command_reaches_every_process(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 4)
    r.set("crawl1:stopping", "1")
    assert crawler.wait() == 0
    assert r.hgetall("crawl1:status") == {INSTANCE: "done"}
    assert r.hlen("crawl1:p") == 0
    assert len(crawler.collection.pages) < len(big_site.expected_pages())
    assert wacz_validate(crawler.collection.wacz).returncode == 0
    assert len(warcs_in(crawler.collection.wacz)) == 2


def test_cancel_hands_back_every_process_pages_and_writes_no_wacz(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 4)
    r.set("crawl1:canceled", "1")
    assert crawler.wait() == 0
    assert r.hgetall("crawl1:status") == {INSTANCE: "canceled"}
    assert r.hlen("crawl1:p") == 0
    assert not crawler.collection.wacz.exists()


def test_the_size_limit_counts_every_process(spawn, large_site, r):
    crawler = spawn(large_site.url, "--workers", "4", "--processes", "2", "--generateWACZ",
                    "--sizeLimit", "300000")
    assert crawler.wait() == 14
    assert r.hgetall("crawl1:status") == {INSTANCE: "interrupted"}
    assert r.hlen("crawl1:p") == 0
    # The session's WARCs and page lines, both processes': the parent stopped them on their
    # sum, within a few pages of the limit.
    size = int(r.hget("crawl1:size", INSTANCE))
    assert 300000 <= size < 1.2 * 300000
    assert len(list((crawler.collection.dir / "archive").glob("*.warc.gz"))) == 2
    assert len(crawler.collection.pages) < len(large_site.expected_pages())
    assert wacz_validate(crawler.collection.wacz).returncode == 0


def test_an_exclusion_reaches_every_process(spawn, big_site, r):
    crawler = spawn(big_site.url, "--hostDelay", "0.1", "--workers", "2", "--processes", "2")
    wait_for(lambda: any(json.loads(m)["url"].endswith("/gen/p35.html")
                         for m in r.zrange("crawl1:q", 0, -1)))
    r.rpush(f"{INSTANCE}:msg", json.dumps({"type": "addExclusion", "regex": r"/gen/p3\d"}))
    assert crawler.wait() == 0
    # Each process applied it (the runner pushes to the one instance's list).
    assert crawler.collection.log_text.count(r"exclusion /gen/p3\\d added") == 2
    excluded = r.smembers("crawl1:excluded")
    assert excluded
    for url in excluded:
        assert big_site.requests[url.removeprefix(big_site.root)] == 0
        assert url not in crawler.collection.page_urls


def test_a_killed_process_has_its_pages_requeued_and_the_crawl_completes(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW, "--writePagesToRedis")
    wait_for(lambda: len(children_of(crawler.proc.pid)) == 2 and pages_done(r) >= 4
             and any(json.loads(v)["owner"].startswith(INSTANCE + "#")
                     for v in r.hvals("crawl1:p")))
    victim = children_of(crawler.proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    assert crawler.wait(60) == 0
    assert r.hgetall("crawl1:status") == {INSTANCE: "done"}
    assert r.hlen("crawl1:p") == 0
    assert "before finishing" in crawler.collection.log_text
    # Every page was crawled (a page the killed process had archived but not recorded is
    # fetched again: the same as a killed instance's).
    assert crawler.collection.page_urls == big_site.expected_pages()
    assert int(r.get("crawl1:d")) == len(big_site.expected_pages())
    assert wacz_validate(crawler.collection.wacz).returncode == 0


def test_a_killed_parent_stops_its_processes(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW)
    wait_for(lambda: len(children_of(crawler.proc.pid)) == 2 and pages_done(r) >= 2)
    children = children_of(crawler.proc.pid)
    crawler.proc.send_signal(signal.SIGKILL)
    crawler.wait()

    def gone(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
        except FileNotFoundError:
            return True

    wait_for(lambda: all(gone(pid) for pid in children), timeout=30)
    assert r.hlen("crawl1:p") == 0  # each handed its pages back


def options(*extra: str) -> list[str]:
    return ["--url", "http://example.com/", *extra]


def test_processes_default_to_the_available_cpus_capped_by_workers():
    assert parse_args(options("--workers", "64")).processes == available_cpus()
    assert parse_args(options("--workers", "1")).processes == 1
    assert parse_args(options("--workers", "8", "--processes", "3")).processes == 3
    assert parse_args(options("--workers", "2", "--processes", "5")).processes == 2
    # Spread over processes a host delay only holds on average: one unless asked.
    assert parse_args(options("--workers", "8", "--hostDelay", "1")).processes == 1
    with pytest.raises(ConfigError):
        parse_args(options("--processes", "0"))


def test_the_available_cpus_are_capped_by_the_cgroup_quota(tmp_path):
    cpu_max = tmp_path / "cpu.max"
    affinity = len(os.sched_getaffinity(0))
    cpu_max.write_text("max 100000\n")
    assert available_cpus(cpu_max) == affinity
    cpu_max.write_text("50000 100000\n")  # half a CPU is still one process
    assert available_cpus(cpu_max) == 1
    cpu_max.write_text(f"{affinity * 100000 + 1} 100000\n")
    assert available_cpus(cpu_max) == affinity
    assert available_cpus(tmp_path / "absent") == affinity


def test_processes_above_one_are_refused_in_browser_mode(tmp_path):
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    browser = options("--browser", "--chromium", str(chromium), "--workers", "4")
    assert parse_args(browser).processes == 1
    with pytest.raises(ConfigError, match="HTTP mode only"):
        parse_args([*browser, "--processes", "2"])


def test_pages_of_an_instances_processes_go_by_its_status_and_its_journal(redis_url, tmp_path):
    """The scripts behind a dead process: its pages held under `<instance>#...` are taken
    back by the instance (all of them) or one process (its own); `settle` judges them by the
    instance's status; a journaled outcome is recorded in its process's name."""
    async def run() -> dict:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            instance = CrawlState(client, "c1", "i0")
            procs = [CrawlState(client, "c1", "i0", f"i0#s-{k}") for k in range(2)]
            other = CrawlState(client, "c1", "i1")
            for state in (instance, *procs, other):
                await state.load_scripts()
            urls = [f"http://127.0.0.1:9/{n}" for n in range(4)]
            await instance.add([QueueEntry(url=u, seed_id=0, depth=0) for u in urls], 100)
            for state in (procs[0], procs[0], procs[1], procs[1]):
                await state.commit(None, 100, "2000-01-01T00:00:00.000Z")
            await instance.set_status("running")
            seen = {"process": await instance.requeue_process("i0#s-0")}
            for _ in range(2):
                await procs[0].commit(None, 100, "2000-01-01T00:00:00.000Z")
            seen["alive"] = (await other.settle("2100-01-01T00:00:00.000Z")).requeued
            await instance.set_status("done")
            seen["gone"] = (await other.settle("2100-01-01T00:00:00.000Z")).requeued
            for _ in range(2):
                await procs[1].commit(None, 100, "2000-01-01T00:00:00.000Z")
            seen["whole"] = await instance.requeue_own()
            claimed = (await procs[1].commit(None, 100, "2000-01-01T00:00:00.000Z")).claimed
            journal.save(tmp_path, Outcome(claimed.url, page="{}"), procs[1].owner)
            (saved,) = journal.saved(tmp_path)
            seen["recorded"] = (await instance.commit(saved, 100, None,
                                                      owner=saved.owner)).recorded
            return seen
        finally:
            await client.aclose()

    assert asyncio.run(run()) == {"process": 2, "alive": 0, "gone": 4, "whole": 2,
                                  "recorded": True}

"""Steering a running crawl through Redis: stop, cancel, pause/resume, stopone, exclusions,
several instances on one crawl, and relaunching an instance."""

from __future__ import annotations

import json
import signal
import zipfile

from tests.crawler.wacz_check import wacz_validate
from tests.sitegen import serve_site
from tests.waiting import wait_for

SLOW = ("--hostDelay", "0.04", "--generateWACZ", "--workers", "2")


def pages_done(r) -> int:
    return int(r.get("crawl1:d") or 0)


def test_stopping_finishes_current_pages_writes_the_wacz_and_exits_0(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 3)
    r.set("crawl1:stopping", "1")
    assert crawler.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "done"
    assert 3 <= len(crawler.collection.pages) < len(big_site.expected_pages())
    assert r.hlen("crawl1:p") == 0
    assert wacz_validate(crawler.collection.wacz).returncode == 0


def test_canceling_exits_0_with_status_canceled_and_no_wacz(spawn, big_site, r):
    crawler = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 3)
    r.set("crawl1:canceled", "1")
    assert crawler.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "canceled"
    assert not crawler.collection.wacz.exists()


def test_a_paused_crawl_resumes_where_it_stopped_and_fetches_nothing_twice(spawn, big_site, r):
    first = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 3)
    r.set("crawl1:paused", "1")
    assert first.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "interrupted"
    assert first.collection.wacz.exists()
    assert r.zcard("crawl1:q") > 0 and r.hlen("crawl1:p") == 0
    paused_at = len(first.collection.pages)

    r.delete("crawl1:paused")
    second = spawn(big_site.url, *SLOW)
    assert second.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "done"
    assert second.collection.page_urls == big_site.expected_pages()
    assert len(second.collection.pages) == len(big_site.expected_pages()) > paused_at
    assert set(big_site.requests.values()) == {1}
    with zipfile.ZipFile(second.collection.wacz) as zf:
        assert len([n for n in zf.namelist() if n.startswith("archive/")]) == 2
    assert wacz_validate(second.collection.wacz).returncode == 0


def test_stopone_ends_one_instance_while_the_other_finishes_the_crawl(spawn, big_site, r):
    a = spawn(big_site.url, *SLOW, instance="crawl-crawl1-0")
    b = spawn(big_site.url, *SLOW, instance="crawl-crawl1-1")
    wait_for(lambda: pages_done(r) >= 4 and r.hlen("crawl1:status") == 2)
    r.hset("crawl1:stopone", "crawl-crawl1-0", "1")
    assert a.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "done"
    assert b.wait() == 0
    assert r.hget("crawl1:status", "crawl-crawl1-1") == "done"
    assert b.collection.page_urls == big_site.expected_pages()
    assert set(big_site.requests.values()) == {1}


def test_two_instances_share_one_crawl_without_fetching_a_url_twice(spawn, big_site, r):
    big_site.hold()  # both instances are up before the first page is answered
    a = spawn(big_site.url, "--workers", "3", "--hostDelay", "0.03",
              instance="crawl-crawl1-0")
    b = spawn(big_site.url, "--workers", "3", "--hostDelay", "0.03",
              instance="crawl-crawl1-1")
    wait_for(lambda: r.hlen("crawl1:status") == 2)
    big_site.release()
    assert a.wait() == 0 and b.wait() == 0
    assert r.hgetall("crawl1:status") == {"crawl-crawl1-0": "done", "crawl-crawl1-1": "done"}
    assert set(big_site.requests.values()) == {1}
    assert int(r.get("crawl1:d")) == len(big_site.expected_pages())
    assert a.collection.page_urls == big_site.expected_pages()
    # both instances wrote into the shared collection, each into a WARC of its own
    assert len(list((a.collection.dir / "archive").glob("*.warc.gz"))) == 2


def test_an_exclusion_message_drops_queued_urls(spawn, big_site, r):
    crawler = spawn(big_site.url, "--hostDelay", "0.1", "--workers", "1")
    wait_for(lambda: any(json.loads(m)["url"].endswith("/gen/p35.html")
                         for m in r.zrange("crawl1:q", 0, -1)))
    r.rpush("crawl-crawl1-0:msg", json.dumps({"type": "addExclusion", "regex": r"/gen/p3\d"}))
    assert crawler.wait() == 0
    excluded = r.smembers("crawl1:excluded")
    assert excluded
    for url in excluded:
        assert big_site.requests[url.removeprefix(big_site.root)] == 0
        assert url not in crawler.collection.page_urls


def test_a_relaunched_instance_requeues_its_pages_in_progress(spawn, big_site, r):
    first = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 3 and r.hlen("crawl1:p") > 0)
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    assert r.hlen("crawl1:p") > 0
    second = spawn(big_site.url, *SLOW)
    assert second.wait() == 0
    assert r.hlen("crawl1:p") == 0
    assert second.collection.page_urls == big_site.expected_pages()
    assert int(r.get("crawl1:d")) == len(big_site.expected_pages())
    # The killed session's WARC has no index beside it: packaging indexes it from the WARC.
    assert wacz_validate(second.collection.wacz).returncode == 0
    with zipfile.ZipFile(second.collection.wacz) as zf:
        index = zf.read("indexes/index.cdxj").decode()
    indexed = {json.loads(line.split(" ", 2)[2])["url"] for line in index.splitlines()}
    assert big_site.expected_pages() <= indexed


def test_a_relaunched_instance_that_is_done_exits_at_once(spawn, site, r):
    assert spawn(site.url).wait() == 0
    site.reset_counts()
    again = spawn(site.url)
    assert again.wait() == 0
    assert sum(site.requests.values()) == 0


def test_a_relaunch_with_stopping_set_only_writes_the_wacz(spawn, big_site, r):
    first = spawn(big_site.url, *SLOW)
    wait_for(lambda: pages_done(r) >= 2)
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    r.set("crawl1:stopping", "1")
    # Its own user agent: a request of the killed one may still be on its way to the site.
    second = spawn(big_site.url, *SLOW, "--userAgent", "relaunch")
    assert second.wait() == 0
    assert big_site.agents["relaunch"] == 0
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "done"
    assert second.collection.wacz.exists()


def test_an_idle_instance_waits_for_the_pages_of_the_other_before_it_is_done(spawn, r):
    with serve_site() as site:
        site.hold()
        busy = spawn(site.root + "/site/slow.html", "--scopeType", "page",
                     instance="crawl-crawl1-0")
        wait_for(lambda: site.requests["/site/slow.html"] == 1)
        idle = spawn(site.root + "/site/slow.html", "--scopeType", "page",
                     instance="crawl-crawl1-1")
        wait_for(lambda: r.hget("crawl1:status", "crawl-crawl1-1") == "pending-wait")
        assert idle.proc.poll() is None
        site.release()
        assert busy.wait() == 0 and idle.wait() == 0
    assert r.hgetall("crawl1:status") == {"crawl-crawl1-0": "done", "crawl-crawl1-1": "done"}
    assert site.requests["/site/slow.html"] == 1


def test_two_instances_never_exceed_the_page_limit(spawn, big_site, r):
    a = spawn(big_site.url, "--limit", "12", "--workers", "3", instance="crawl-crawl1-0")
    b = spawn(big_site.url, "--limit", "12", "--workers", "3", instance="crawl-crawl1-1")
    assert a.wait() == 0 and b.wait() == 0
    assert r.scard("crawl1:s") == 12
    assert len(a.collection.pages) == 12
    assert sum(n for path, n in big_site.requests.items() if path.endswith(".html")
               or path == "/gen/") == 12


def test_the_health_check_port_answers_while_the_instance_runs(spawn, big_site, r):
    import urllib.request

    from tests.ports import free_port

    port = free_port()
    big_site.hold()  # the crawl cannot end before the probe
    crawler = spawn(big_site.url, "--healthCheckPort", str(port))
    wait_for(lambda: r.hget("crawl1:status", "crawl-crawl1-0") == "running")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        assert answer.status == 200
    big_site.release()
    assert crawler.wait() == 0


def test_python_dash_m_runs_the_same_entry_point(site, redis_url, tmp_path):
    import subprocess
    import sys

    from tests.crawler.running import base_args

    done = subprocess.run([sys.executable, "-m", "archiver_crawler",
                           *base_args(site.url, redis_url, tmp_path), "--scopeType", "page"],
                          capture_output=True, timeout=30)
    assert done.returncode == 0

"""Exit codes of the cases this crawler can meet (the real crawler's numbers)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from tests.crawler.running import CRAWLER
from tests.ports import refused_port
from tests.sitegen import serve_site
from tests.waiting import HANG, wait_for


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CRAWLER, *args], capture_output=True, text=True, timeout=30)


def test_an_unknown_option_exits_4_with_a_message(tmp_path):
    result = run("--url", "http://127.0.0.1:9/", "--noSuchOption", "--cwd", str(tmp_path))
    assert result.returncode == 4
    assert "--noSuchOption" in result.stderr


def test_an_invalid_collection_name_exits_4(tmp_path):
    result = run("--url", "http://127.0.0.1:9/", "--collection", "-bad name")
    assert result.returncode == 4
    assert "collection" in result.stderr


def test_an_invalid_scope_type_exits_4():
    result = run("--url", "http://127.0.0.1:9/", "--scopeType", "galaxy")
    assert result.returncode == 4


def test_no_seed_exits_4():
    assert run("--workers", "2").returncode == 4


def test_an_unknown_key_in_the_config_file_exits_4(tmp_path):
    config = tmp_path / "c.json"
    config.write_text('{"seeds": ["http://127.0.0.1:9/"], "frobnicate": 1}')
    result = run("--config", str(config))
    assert result.returncode == 4
    assert "frobnicate" in result.stderr


def test_an_unreachable_redis_exits_8(tmp_path):
    with refused_port() as port:
        result = run("--url", "http://127.0.0.1:9/", "--cwd", str(tmp_path),
                     "--redisStoreUrl", f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 8


def test_the_time_limit_ends_the_session_gracefully_with_15(spawn, big_site, r):
    crawler = spawn(big_site.url, "--timeLimit", "1", "--hostDelay", "0.1", "--generateWACZ")
    assert crawler.wait() == 15
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "interrupted"
    assert crawler.collection.wacz.exists()
    assert r.zcard("crawl1:q") > 0 and r.hlen("crawl1:p") == 0


def test_the_size_limit_ends_the_session_gracefully_with_14(spawn, big_site, r):
    crawler = spawn(big_site.url, "--sizeLimit", "8000", "--hostDelay", "0.02",
                    "--generateWACZ")
    assert crawler.wait() == 14
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "interrupted"
    assert crawler.collection.wacz.exists()
    assert 0 < len(crawler.collection.pages) < len(big_site.expected_pages())


def test_disk_utilization_above_the_threshold_exits_16(spawn, site, r):
    crawler = spawn(site.url, "--diskUtilization", "1")
    assert crawler.wait() == 16
    assert sum(site.requests.values()) == 0


def test_a_first_sigterm_finishes_current_pages_and_exits_11(spawn, big_site, r):
    crawler = spawn(big_site.url, "--hostDelay", "0.05", "--generateWACZ")
    wait_for(lambda: int(r.get("crawl1:d") or 0) >= 2)
    crawler.proc.send_signal(signal.SIGTERM)
    assert crawler.wait() == 11
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "interrupted"
    assert r.hlen("crawl1:p") == 0
    assert crawler.collection.wacz.exists()


def test_a_second_signal_exits_13_without_waiting_for_the_page_in_flight(spawn, r):
    # The page would answer only after twice the hang bound: exiting under it is not waiting.
    with serve_site(slow_delay=2 * HANG) as site:
        crawler = spawn(site.root + "/site/slow.html", "--generateWACZ")
        wait_for(lambda: site.requests["/site/slow.html"] == 1)
        crawler.proc.send_signal(signal.SIGINT)
        # Two signals sent before the first is handled are merged into one by the kernel.
        wait_for(lambda: "stopping: signal" in crawler.collection.log_text)
        started = time.monotonic()
        crawler.proc.send_signal(signal.SIGINT)
        assert crawler.wait() == 13
        assert time.monotonic() - started < HANG
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "interrupted"
    assert r.hlen("crawl1:p") == 0  # the abandoned page was handed back
    queued = [json.loads(m)["url"] for m in r.zrange("crawl1:q", 0, -1)]
    assert queued == [site.root + "/site/slow.html"]


def test_losing_redis_during_the_crawl_exits_8(spawn, big_site, tmp_path):
    from tests.private_redis import start_redis

    (tmp_path / "redis").mkdir()
    server = start_redis(tmp_path / "redis")
    try:
        crawler = spawn(big_site.url, "--hostDelay", "0.05", redis=server.url(0))
        wait_for(lambda: big_site.requests["/gen/"] == 1)
    finally:
        server.process.terminate()
        server.process.wait(timeout=10)
    code = crawler.wait()
    assert code == 8, crawler.stderr[-3000:]


def test_running_out_of_disk_space_anywhere_exits_3_not_1():
    import errno

    from archiver_crawler.cli import unexpected
    from archiver_crawler.errors import ExitCode

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("packaging the WACZ failed") from inner
    except RuntimeError as exc:
        assert unexpected(exc) == ExitCode.OUT_OF_SPACE
    assert unexpected(ValueError("something else")) == ExitCode.GENERIC_ERROR

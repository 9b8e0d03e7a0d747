"""Browser mode draws on the same budget per host (issue 42): every request Chromium makes is
sent by archiver through it, so a 429 pauses the page's host and the page ends archived."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from archiver_crawler.browser import find_chromium

from tests.sitegen import Response, serve_site

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="no Chromium (apt-get install chromium)")


def test_a_429_to_the_browser_pauses_the_host_and_the_page_is_archived(spawn, redis_server):
    redis.Redis.from_url(redis_server.url(0)).flushdb()  # the shared key space: no old budget
    times: list[tuple[float, str]] = []
    with serve_site(pages=6) as site:
        plain = site.routes["/gen/p3.html"]
        counted = site.count

        def count(path: str, agent: str) -> None:
            times.append((time.monotonic(), path))
            counted(path, agent)
            first = sum(1 for _, p in times if p == "/gen/p3.html") == 1
            site.routes["/gen/p3.html"] = Response(
                status=429, body=b"slow down", content_type="text/plain",
                headers={"Retry-After": "2"}) if first and path == "/gen/p3.html" else plain

        lock = threading.Lock()

        def count_locked(path: str, agent: str) -> None:
            with lock:
                count(path, agent)

        site.count = count_locked
        run = spawn(site.url, "--browser", "--workers", "2", "--pageLoadTimeout", "20",
                    "--hostRate", "5")
        assert run.wait(timeout=60) == 0, run.stderr
    answered = next(t for t, path in times if path == "/gen/p3.html")
    assert [path for t, path in times if answered < t < answered + 1.9] == []
    pages = [json.loads(line) for line in
             (run.collection.dir / "pages" / "pages.jsonl").read_text().splitlines()[1:]]
    assert [p["status"] for p in pages if p["url"].endswith("/gen/p3.html")] == [200]
    assert "it answered 429" in run.collection.log_text

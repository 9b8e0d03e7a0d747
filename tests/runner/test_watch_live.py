"""Watching a browser-mode crawl live (issue 41): archiver's own crawler (a local process, the
host's Chromium, a site on 127.0.0.1) draws each tab's viewport into the crawl's Redis while
someone watches, and the admin's watch.json passes the frames on. Nobody watching: no frame
is drawn at all."""

from __future__ import annotations

import base64
import io
import json
from types import SimpleNamespace

import pytest
from archiver_crawler.browser import find_chromium
from django.test import override_settings
from django.urls import reverse
from PIL import Image

from crawls import actions, screencast
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.launchers import LocalLauncher
from tests.runner.helpers import is_final
from tests.sitegen import Response, serve_site
from tests.waiting import drive

CHROMIUM = find_chromium()
RED = (200, 20, 20)


@pytest.fixture
def admin_view(settings, redis_server, monkeypatch, tmp_path):
    """The admin's settings: the private Redis (`settings` here is archiver's, and the runner
    in the same process keeps its own), and Django's static files where whitenoise finds them."""
    admin = settings.model_copy(update={"redis_url": redis_server.url(0)})
    monkeypatch.setattr("crawls.metrics.conf", SimpleNamespace(get=lambda: admin))
    (tmp_path / "static").mkdir()
    with override_settings(STATIC_ROOT=tmp_path / "static"):
        yield admin


def held_page() -> dict[str, Response]:
    # The image answers long after the test is done: the tab stays open on a red page.
    body = (b"<!doctype html><title>Watched</title><style>html,body{margin:0;height:100%;"
            b"background:rgb(200,20,20)}</style><h1>watched</h1><img src=/w/slow.png>")
    return {"/w/": Response(body=body), "/w/slow.png": Response(body=b"", content_type="image/png", delay=600)}


def redness(jpeg: bytes) -> float:
    image = Image.open(io.BytesIO(jpeg)).convert("RGB")
    assert image.size == (640, 360)
    data = image.resize((32, 18)).tobytes()
    pixels = [tuple(data[i:i + 3]) for i in range(0, len(data), 3)]
    near = [p for p in pixels if all(abs(c - r) < 40 for c, r in zip(p, RED, strict=True))]
    return len(near) / len(pixels)


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_a_watched_browser_crawl_shows_each_tab_and_an_unwatched_one_draws_nothing(
        make_runner, make_crawl, settings, endpoint, admin_view, admin_client):
    local = settings.model_copy(update={"chromium": CHROMIUM})
    with serve_site(extra=held_page()) as site:
        crawl = make_crawl(site.root + "/w/", browser=True, page_load_timeout=300, screenshot=["none"])
        runner = make_runner(LocalLauncher(local), settings=local, clock=db_now)
        drive(runner, lambda: site.requests["/w/slow.png"], timeout=120)

        # Nobody watched yet: the tab is open on the page (it asked for the image), and no
        # frame was kept (a tab looks at the watch flag as it opens).
        crawl.refresh_from_db()
        client = endpoint.client(crawl.redis_db)
        assert not list(client.scan_iter(match=f"{crawl.id}:screencast:*"))

        url = reverse("admin:crawls_crawl_watch_frames", args=[crawl.pk])
        seen = {}

        def watched() -> bool:
            answer = admin_client.get(url).json()
            seen.update(answer)
            return bool(answer["frames"])

        drive(runner, watched, timeout=60)
        (frame,) = seen["frames"]
        assert frame["url"] == site.root + "/w/" and frame["tab"] == "instance 0, tab 1"
        jpeg = base64.b64decode(frame["src"].removeprefix("data:image/jpeg;base64,"))
        assert redness(jpeg) > 0.8  # the page itself, drawn at 640x360
        (key,) = [k for k in client.scan_iter(match=f"{crawl.id}:screencast:*") if not k.endswith("watch")]
        assert 0 < client.ttl(key) <= 10 and json.loads(client.get(key))["url"] == frame["url"]

        actions.cancel(crawl)  # a graceful stop would let the held page run to its timeout
        drive(runner, is_final(crawl), timeout=120)
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.CANCELED, crawl.error
    finished = admin_client.get(url).json()
    assert finished["final"] and finished["frames"] == [] and finished["why"].startswith("The crawl is over: ")



@pytest.mark.django_db
def test_only_a_jpeg_a_crawler_wrote_is_passed_on_and_reading_asks_for_frames(make_crawl, endpoint, admin_view):
    crawl = make_crawl()
    type(crawl).objects.filter(pk=crawl.pk).update(redis_db=7)
    crawl.refresh_from_db()
    client = endpoint.client(7)
    client.flushdb()
    jpeg = b"\xff\xd8\xff\xe0" + b"\x00" * 100
    written = {
        "good": {"url": "http://127.0.0.1/a", "ts": 1000.0, "jpeg": base64.b64encode(jpeg).decode()},
        "html": {"url": "http://127.0.0.1/b", "ts": 1000.0, "jpeg": base64.b64encode(b"<script>x</script>").decode()},
        "huge": {"url": "http://127.0.0.1/c", "ts": 1000.0,
                 "jpeg": base64.b64encode(jpeg + b"\x00" * (256 << 10)).decode()},
        "text": "not json",
    }
    for slot, (_name, value) in enumerate(written.items()):
        client.set(f"{crawl.id}:screencast:crawl-{crawl.id}-0:42:{slot}", json.dumps(value) if isinstance(value, dict) else value)
    shown, why = screencast.frames(crawl, now=1003.0)
    assert [(f["url"], f["tab"], f["age"]) for f in shown] == [("http://127.0.0.1/a", "instance 0, tab 1", 3)]
    assert why == "" and 0 < client.ttl(f"{crawl.id}:screencast:watch") <= screencast.WATCH_TTL
    client.flushdb()

"""Quality review replays a page at the capture's viewport (runner/qa.py): a 1920x1080
capture, as browsertrix-crawler takes its screenshots, is compared with a 1920x1080 replay
and scores as the same page (it scored 0.00 against the 1280-wide default). Real Chromium,
a page on 127.0.0.1, the archive written by archiver's own browser engine."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import zlib

import pytest
from archiver_crawler.browser import (
    BrowserEngine,
    EngineOptions,
    PageOptions,
    find_chromium,
    write_capture,
)
from archiver_crawler.netpolicy import AddressPolicy, parse_networks
from archiver_crawler.wacz import build_wacz
from archiver_crawler.warc import WarcFile
from PIL import Image

from archiver.conf import Settings
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org, PageReview
from runner import qa
from tests.search.waczs import HEADER, keep, real_crawler_page
from tests.sitegen import Response, serve_site

CHROMIUM = find_chromium()
pytestmark = [pytest.mark.django_db]
WIDE = (1920, 1080)
# Wide boxes at the right edge: a replay 1280 pixels wide shows none of them.
PAGE = ("<!doctype html><title>Wide</title><body style='margin:0'>"
        "<h1 style='font-size:90px'>A page seen 1920 wide</h1>"
        + "".join(f"<div style='position:absolute;left:{1300 + 100 * (n % 5)}px;top:{200 + 150 * (n // 5)}px;"
                  f"width:80px;height:120px;background:#{n * 30 % 255:02x}3060'></div>" for n in range(25))
        + "</body>").encode()


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_a_screenshot_s_size_is_read_from_its_png_header_within_bounds():
    assert qa.png_size(png(1920, 1080)) == (1920, 1080)
    assert qa.png_size(png(1280, 713)) == (1280, 713)
    assert qa.png_size(png(50_000, 1080)) is None  # no tab that wide
    assert qa.png_size(b"\xff\xd8\xff\xe0 a JPEG") is None and qa.png_size(b"") is None


def test_a_crawl_of_the_real_image_is_replayed_at_its_viewport_and_one_of_archivers_at_the_default():
    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    assert qa.crawl_viewport(crawl) is None
    process = crawl.processes.create(instance=0, hostname="h", launcher="docker",
                                     image="webrecorder/browsertrix-crawler:1.14.1")
    assert qa.crawl_viewport(crawl) == (1920, 1080)
    crawl.processes.filter(pk=process.pk).update(image="archiver/crawler:0.1.0")
    assert qa.crawl_viewport(crawl) is None


def captured_wide(url: str, folder) -> object:
    async def main():
        engine = BrowserEngine(AddressPolicy(parse_networks(["127.0.0.1/32"])), EngineOptions(
            executable=CHROMIUM, workers=1, page=PageOptions(screenshots=("view",), viewport=WIDE)))
        await engine.start()
        try:
            return await engine.capture(url)
        finally:
            await engine.close()

    capture = asyncio.run(main())
    warc = WarcFile(folder / "archive", "inst", "wide")
    write_capture(warc, capture, "page-1")
    warc.close()
    (folder / "pages").mkdir()
    entry = real_crawler_page(url, capture.title, capture.text)
    (folder / "pages" / "pages.jsonl").write_text(json.dumps(HEADER) + "\n" + json.dumps(entry) + "\n")
    return capture, build_wacz(folder, "wide")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (apt-get install chromium)")
def test_a_1920_by_1080_capture_is_replayed_at_1920_by_1080_and_scores_as_the_same_page(
        tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    settings = Settings(data_dir=data_dir, chromium=CHROMIUM)
    monkeypatch.setattr("archiver.conf.get", lambda: settings)
    with serve_site(extra={"/wide/": Response(body=PAGE)}) as site:
        capture, wacz = captured_wide(site.root + "/wide/", tmp_path / "coll")
    assert Image.open(io.BytesIO(capture.screenshot)).size == WIDE

    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=[site.root + "/wide/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    crawl.refresh_from_db()
    keep(data_dir, crawl, wacz)
    assert qa.review(crawl, settings) == 1  # the site is gone: the replay is the archive's
    (row,) = PageReview.objects.filter(crawl=crawl)
    assert row.error == "" and row.has_capture_shot
    assert qa.png_size((data_dir / row.replay_shot).read_bytes()) == WIDE
    assert row.screenshot_score >= 0.9, row.__dict__

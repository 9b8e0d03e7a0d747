"""Browser mode's screenshots as browsertrix-crawler records them (`urn:view:` PNG of the
viewport, `urn:thumbnail:` 640x360 JPEG, `urn:fullPage:` PNG of the whole page), a viewport
asked for, and the text of the page's frames in its text: real Chromium, a site on 127.0.0.1,
one browser for the file."""

from __future__ import annotations

import asyncio
import io

import pytest
from archiver_crawler.browser import (
    BrowserEngine,
    EngineOptions,
    PageOptions,
    find_chromium,
    write_capture,
)
from archiver_crawler.browser.shots import shot_params
from archiver_crawler.netpolicy import AddressPolicy, parse_networks
from archiver_crawler.warc import WarcFile
from PIL import Image
from warcio.archiveiterator import ArchiveIterator

from tests.sitegen import FILLER, Response, serve_site

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="no Chromium (apt-get install chromium)")

SHOTS = PageOptions(screenshots=("view", "thumbnail", "fullPage"))
WIDE = PageOptions(screenshots=("view",), viewport=(1920, 1080))


def framed_site() -> dict[str, Response]:
    page = ('<!doctype html><html><head><title>Framed</title></head><body><h1>Outside words</h1>'
            '<iframe src="/f/frame.html"></iframe>'
            '<iframe srcdoc="<p>srcdoc frame words</p>"></iframe>'
            f'{FILLER * 40}</body></html>')
    frame = ('<!doctype html><html><body><p>Words inside the frame</p>'
             '<iframe src="/f/inner.html"></iframe></body></html>')
    return {"/f/": Response(body=page.encode()), "/f/frame.html": Response(body=frame.encode()),
            "/f/inner.html": Response(body=b"<!doctype html><p>Nested frame words</p>")}


@pytest.fixture(scope="module")
def captures():
    """The framed page captured with every screenshot, and again in a 1920x1080 viewport."""
    async def main(url: str):
        engine = BrowserEngine(AddressPolicy(parse_networks(["127.0.0.1/32", "::1/128"])),
                               EngineOptions(workers=2, page=SHOTS))
        await engine.start()
        try:
            return await asyncio.gather(engine.capture(url), engine.capture(url, WIDE))
        finally:
            await engine.close()

    with serve_site(extra=framed_site()) as site:
        # A cross-site frame (localhost is another site than 127.0.0.1): Chromium runs it
        # in a process of its own, read through its own session.
        port = site.root.rsplit(":", 1)[1]
        page = site.routes["/f/"]
        site.routes["/f/"] = Response(body=page.body.replace(
            b"</h1>", f'</h1><iframe src="http://localhost:{port}/f/cross.html"></iframe>'.encode()))
        site.routes["/f/cross.html"] = Response(body=b"<!doctype html><p>Cross-site frame words</p>")
        yield site.root + "/f/", asyncio.run(main(site.root + "/f/"))


def size(data: bytes) -> tuple[str, tuple[int, int]]:
    image = Image.open(io.BytesIO(data))
    return image.format, image.size


def test_view_thumbnail_and_full_page_are_taken_in_their_formats(captures):
    _url, (capture, _wide) = captures
    assert capture.error == ""
    shots = {shot.kind: shot for shot in capture.screenshots}
    assert list(shots) == ["view", "thumbnail", "fullPage"]
    kind, (width, height) = size(shots["view"].data)
    assert kind == "PNG" and shots["view"].mime == "image/png"
    assert size(shots["thumbnail"].data) == ("JPEG", (640, 360)) and shots["thumbnail"].mime == "image/jpeg"
    full_kind, (full_width, full_height) = size(shots["fullPage"].data)
    assert full_kind == "PNG" and full_width == width and full_height > height


def test_the_viewport_asked_for_is_the_screenshot_s_size(captures):
    _url, (_capture, wide) = captures
    assert size(wide.screenshot) == ("PNG", (1920, 1080))


def test_each_screenshot_is_a_resource_record_of_its_kind(captures, tmp_path):
    url, (capture, _wide) = captures
    warc = WarcFile(tmp_path, "inst", "coll")
    write_capture(warc, capture, "page-1")
    warc.close()
    found = {}
    for path in tmp_path.glob("*.warc.gz"):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                found[record.rec_headers.get_header("WARC-Target-URI")] = (
                    record.rec_type, record.rec_headers.get_header("Content-Type"),
                    record.rec_headers.get_header("WARC-Page-ID"))
    for kind, mime in (("view", "image/png"), ("thumbnail", "image/jpeg"), ("fullPage", "image/png")):
        assert found[f"urn:{kind}:{url}"] == ("resource", mime, "page-1")


def test_the_text_of_every_frame_is_in_the_page_s_text(captures):
    _url, (capture, _wide) = captures
    for words in ("Outside words", "Words inside the frame", "srcdoc frame words", "Nested frame words",
                  "Cross-site frame words"):
        assert words in capture.text


def test_a_thumbnail_is_cut_to_16_by_9_from_the_top_left_whatever_the_viewport():
    tall = shot_params("thumbnail", (1280, 800), (1280, 5000))["clip"]
    assert (tall["width"], tall["height"], tall["scale"]) == (1280, 720, 0.5)
    wide = shot_params("thumbnail", (2000, 900), (2000, 900))["clip"]
    assert (wide["width"], wide["height"]) == (1600, 900) and wide["width"] * wide["scale"] == 640
    assert shot_params("fullPage", (1280, 800), (1280, 10**6))["clip"]["height"] == 16_384

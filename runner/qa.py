"""Quality review (issue 25): every page of a kept crawl replayed from its archives in
Chromium and compared with its capture; one PageReview row per page (crawls/models/qa.py).

The replaying browser is archiver's own browser engine (archiver_crawler/browser) with an
exchanger that answers each request from the crawl's WACZs and those they require
(deduplication), and nothing else: a request the archives do not hold fails, as it would
in a replay. Nothing reaches the network (the engine's Chromium has a dead proxy and every
request is intercepted).

Scores, each 0 to 1, None when it cannot be taken:
- text: the words of the replayed page (document.body.innerText) against the captured text
  (pages.jsonl's `text`, else the text of the archived HTML), crawls.diffing.text_similarity;
- resources: the share of the replay's requests the archives answered;
- screenshot: the replay's viewport against the capture's `urn:view:` screenshot, where the
  crawl took one: 1 - (pixels that differ / pixels that are not background), on 320×200
  grey thumbnails, so a missing line of text counts on a white page. The replay's viewport
  is the capture's: its screenshot's size, else the one the crawl's crawler had
  (browsertrix-crawler's 1920×1080; archiver's own has the engine's default window);
and `score`, their mean. The replay's screenshot is kept under the data dir
(qa/<crawl>/<review>/<n>.png) for the admin to show beside the capture's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import io
import os
import secrets
import shutil
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from archiver_crawler.browser import BrowserEngine, BrowserUnavailable, EngineOptions, PageOptions
from archiver_crawler.fetch import FetchError
from archiver_crawler.netpolicy import AddressPolicy
from archiver_crawler.warc import Exchange
from django.db import transaction

from archiver.errors import ArchiverError
from crawls import dedup, diffing, kept_wacz
from crawls.models import Crawl, PageReview
from runner.launchers.engine import OWN_IMAGE

# As the crawler waits by default (load, then network idle): what a script draws late shows.
REPLAY = PageOptions(page_load_timeout=30.0, screenshots=("view",), settle_timeout=2.0)
THUMB = (320, 200)
INK = 32  # grey levels apart: a pixel that differs, or is not background
MAX_PIXELS = 40_000_000  # a screenshot larger than this is not decoded (a bomb)
# A page's replay and scoring; past it the page is failed with that reason. A page's script
# can keep its renderer busy for ever: the engine's own bounds (load, each script's answer,
# a hung browser replaced and the page tried again) let one such page hold a review 126 s.
PAGE_SECONDS = 60.0
TEXT_CHARS = 2 << 20  # of a replayed page's text: the captured one is at most 1 MiB
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
VIEWPORT_BOUNDS = (100, 4096)  # a screenshot's header names no tab larger than this
REAL_CRAWLER_VIEWPORT = (1920, 1080)  # browsertrix-crawler sets it before its screenshots


class ReviewRefused(ArchiverError):
    """The crawl cannot be reviewed (not kept, no browser): the reason, nothing changed."""


class NoBrowser(ReviewRefused):
    """No Chromium on this host: an automatic review is recorded as skipped."""


class ReviewInterrupted(ArchiverError):
    """The runner stops, or the review's lease was lost: nothing changed."""


@dataclass
class Replayed:
    url: str
    text: str | None
    resources: int
    missing: list[str]
    shot: Path | None  # kept at once: a thousand screenshots are not held in memory
    error: str


class ArchiveExchanger:
    """Answers the replaying browser from the archives only."""

    def __init__(self, archives: kept_wacz.Archives, records: dict[str, kept_wacz.Capture]):
        self.archives, self.records = archives, records

    def check_literal(self, url: str) -> None:
        """Every URL may be asked for: only the archives answer."""

    async def close(self) -> None:
        pass

    async def exchange(self, method: str, url: str, headers: dict[str, str],
                       body: bytes | None) -> Exchange:
        key = kept_wacz.normalize_url(url)
        capture = self.records.get(key) if key and method.upper() in ("GET", "HEAD") else None
        record = self.archives.record(capture) if capture is not None else None
        answer = kept_wacz.http_response(record) if record is not None else None
        if answer is None:
            raise FetchError(f"not in the archive: {url}")
        status, reason, response_headers, payload = answer
        return Exchange(url=url, method=method, request_target=url, request_headers=[],
                        http_version="HTTP/1.1", status=status, reason=reason,
                        response_headers=response_headers, body=payload,
                        date=dt.datetime.now(dt.UTC))


def review(crawl: Crawl, settings, limit: int | None = None, workers: int = 2,
           stop: threading.Event | None = None, swap: Callable[[], bool] | None = None,
           before_swap: Callable[[], None] | None = None, page_seconds: float | None = None) -> int:
    """Review the crawl's pages (the first `limit`), replacing its reviews: how many.
    `stop` interrupts it between pages (ReviewInterrupted, nothing changed); `swap`, called
    in the transaction that replaces the rows, may refuse it (a lost lease); `before_swap`
    runs just before that transaction (the lease's renewals stop: no writer waits on it);
    each page is replayed and scored within `page_seconds` (PAGE_SECONDS), else failed."""
    chromium = settings.chromium_path("local")
    if chromium is None:
        raise NoBrowser("no Chromium to replay in (install the chromium package, or set "
                            "ARCHIVER_CHROMIUM to its path)")
    with kept_wacz.Archives(settings) as archives:
        try:
            diffing.check_kept(crawl)
            pages = archives.captures(crawl)
        except diffing.DiffRefused as exc:
            raise ReviewRefused(str(exc)) from None
        records, views = held_records(archives, crawl)
        urls = [url for url, capture in pages.items() if capture.is_html or capture.text is not None]
        urls = urls[:limit] if limit else urls
        resolve_revisits(archives, pages, urls)
        default = crawl_viewport(crawl)
        viewports = {url: capture_viewport(archives, views.get(url)) or default for url in urls}
        # The new screenshots go to a folder of their own; the rows are swapped in one
        # transaction, and only then the old screenshots go: a review that fails half-way
        # leaves the previous review whole, its rows pointing at images that are there.
        crawl_folder = settings.data_dir / "qa" / crawl.pk
        folder = crawl_folder / f"{dt.datetime.now(dt.UTC):%Y%m%d%H%M%S%f}-{secrets.token_hex(4)}"
        def score(replayed: Replayed) -> PageReview:
            return judge(crawl, settings, archives, pages[replayed.url], views.get(replayed.url),
                         replayed, dt.datetime.now(dt.UTC))

        try:
            rows = asyncio.run(replay_all(chromium, viewports, ArchiveExchanger(archives, records), workers,
                                          folder, score, page_seconds or PAGE_SECONDS, stop))
            if before_swap is not None:
                before_swap()
            with transaction.atomic():
                if swap is not None and not swap():
                    raise ReviewInterrupted("its lease was lost")
                PageReview.objects.filter(crawl=crawl).delete()
                PageReview.objects.bulk_create(rows)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    for old in (crawl_folder.iterdir() if crawl_folder.is_dir() else ()):
        if old != folder:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
    return len(rows)


def held_records(archives: kept_wacz.Archives, crawl: Crawl) -> tuple[dict, dict]:
    """Every record of the crawl's archives and of those they require, by URL; and the
    capture's screenshots (urn:view:) by page URL."""
    records: dict[str, kept_wacz.Capture] = {}
    views: dict[str, kept_wacz.Capture] = {}
    files = dedup.with_required(list(crawl.files.order_by("created_at", "pk")))
    for crawl_file in files:
        archive = archives.open(crawl_file)
        for url, capture in kept_wacz.read_index(archive).items():
            capture.file = crawl_file
            if capture.digest and not capture.revisit:
                archives.by_digest.setdefault(capture.digest, capture)
            if crawl_file.crawl_id == crawl.pk or url not in records:
                records[url] = capture
        for url, capture in kept_wacz.screenshots(archive).items():
            capture.file = crawl_file
            views[url] = capture
    # Revisits resolved now: the exchanger answers inside the event loop, where the
    # database (PayloadDigest, for a record in a third archive) may not be asked.
    for url, capture in list(records.items()):
        if capture.revisit:
            original = archives.original(capture)
            if original is None:
                del records[url]
            else:
                records[url] = original
    return records, views


def resolve_revisits(archives: kept_wacz.Archives, pages: dict[str, kept_wacz.Capture], urls: list[str]) -> None:
    """A revisit page's text read now, from the record it names: pages are scored in the
    event loop, where the database (PayloadDigest, for a third archive) may not be asked."""
    for url in urls:
        page = pages[url]
        if page.revisit and page.text is None:
            pages[url] = dataclasses.replace(page, revisit=False, warc="", text=archives.text(page))


async def replay_all(chromium: str, viewports: dict[str, tuple[int, int] | None],
                     exchanger: ArchiveExchanger, workers: int, folder: Path,
                     score: Callable[[Replayed], PageReview], page_seconds: float,
                     stop: threading.Event | None = None) -> list[PageReview]:
    """Each page of `viewports` replayed at its viewport (None: the window's) and scored."""
    options = EngineOptions(executable=chromium, workers=workers, page=REPLAY)
    try:
        engine = BrowserEngine(AddressPolicy(), options, exchanger=exchanger)
        await engine.start()
    except (BrowserUnavailable, OSError) as exc:
        raise ReviewRefused(f"Chromium would not start: {exc}") from None
    slots = asyncio.Semaphore(workers)  # a page's deadline runs from its turn, not from the queue
    replays = asyncio.gather(*(review_page(engine, slots, url, viewport, folder / f"{n}.png", score,
                                           page_seconds)
                               for n, (url, viewport) in enumerate(viewports.items())))
    try:
        while stop is not None and not replays.done():
            await asyncio.wait([replays], timeout=0.2)
            if stop.is_set():
                replays.cancel()
                raise ReviewInterrupted("the runner stops")
        return list(await replays)
    finally:
        await engine.close()


async def review_page(engine: BrowserEngine, slots: asyncio.Semaphore, url: str,
                      viewport: tuple[int, int] | None, shot: Path,
                      score: Callable[[Replayed], PageReview], seconds: float) -> PageReview:
    """The page replayed and scored within `seconds`, else failed with that reason (not tried
    again: a page that held its tab that long would hold it again)."""
    late = Replayed(url, None, 0, [], None, f"not replayed and scored within the page's {seconds:g} s")
    async with slots:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        try:
            async with asyncio.timeout_at(end):
                replayed = await replay_one(engine, url, shot, viewport)
        except TimeoutError:
            return score(late)
        # Scoring is bounded by its work (the text similarity's budget, thumbnails), so it
        # is not cut; a page it took past the deadline is failed all the same.
        row = score(replayed)
        return row if loop.time() <= end else score(late)


async def replay_one(engine: BrowserEngine, url: str, shot: Path,
                     viewport: tuple[int, int] | None = None) -> Replayed:
    capture = await engine.capture(url, dataclasses.replace(REPLAY, viewport=viewport))
    missing = [r.url for r in capture.resources if r.exchange is None]
    if capture.screenshot:
        keep_private(shot, capture.screenshot)
    text = capture.text[:TEXT_CHARS] if capture.load_state >= 3 else None
    return Replayed(url, text, len(capture.resources),
                    missing, shot if capture.screenshot else None, capture.error)


def capture_viewport(archives: kept_wacz.Archives, view: kept_wacz.Capture | None) -> tuple[int, int] | None:
    """The size of the capture's `urn:view:` screenshot, if it has one."""
    record = archives.record(view) if view is not None else None
    taken = kept_wacz.warc_block(record) if record else None
    return png_size(taken) if taken else None


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's header, within VIEWPORT_BOUNDS; None otherwise."""
    if len(data) < 24 or not data.startswith(PNG_MAGIC) or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    low, high = VIEWPORT_BOUNDS
    return (width, height) if low <= width <= high and low <= height <= high else None


def crawl_viewport(crawl: Crawl) -> tuple[int, int] | None:
    """The viewport of the crawl's crawler where it differs from the replay's default: that
    of browsertrix-crawler when one of its images ran it."""
    images = crawl.processes.exclude(image="").values_list("image", flat=True)
    return REAL_CRAWLER_VIEWPORT if any(not image.startswith(OWN_IMAGE) for image in images) else None


def judge(crawl: Crawl, settings, archives: kept_wacz.Archives, page: kept_wacz.Capture,
          view: kept_wacz.Capture | None, replayed: Replayed, now: dt.datetime) -> PageReview:
    text = None if replayed.error else diffing.text_similarity(archives.text(page), replayed.text)
    resources = (1 - len(replayed.missing) / replayed.resources) if replayed.resources else None
    shot = None
    if view is not None and replayed.shot is not None:
        record = archives.record(view)
        taken = kept_wacz.warc_block(record) if record else None
        shot = shot_similarity(taken, replayed.shot.read_bytes()) if taken else None
    scores = [s for s in (text, resources, shot) if s is not None]
    return PageReview(
        crawl=crawl, url=page.url, score=round(sum(scores) / len(scores), 3) if scores else 0.0,
        text_score=_round(text), resources_score=_round(resources), screenshot_score=_round(shot),
        resources_total=replayed.resources, resources_missing=replayed.missing[:50],
        replay_shot=str(replayed.shot.relative_to(settings.data_dir)) if replayed.shot else "",
        has_capture_shot=view is not None, error=replayed.error[:2000], reviewed_at=now)


def shot_similarity(capture: bytes, replay: bytes) -> float | None:
    """1 - changed pixels / ink pixels of two screenshots, on grey thumbnails."""
    from PIL import Image, ImageChops

    def thumb(data: bytes):
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_PIXELS:
            raise ValueError("too large")
        return image.convert("L").resize(THUMB)

    try:
        a, b = thumb(capture), thumb(replay)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None

    def mask(image):
        return image.point(lambda v: 255 if v > INK else 0)

    def ink(image):
        background = max(range(256), key=image.histogram().__getitem__)
        return mask(ImageChops.difference(image, Image.new("L", THUMB, background)))

    changed = mask(ImageChops.difference(a, b)).histogram()[255]
    inked = ImageChops.lighter(ink(a), ink(b)).histogram()[255]
    return 1.0 if inked == 0 else max(0.0, 1 - changed / inked)


def keep_private(path: Path, data: bytes) -> None:
    # qa/<crawl>/<review>/: 0700, like every folder of the data dir.
    for folder in (path.parent.parent.parent, path.parent.parent, path.parent):
        folder.mkdir(exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def replay_shot_path(settings, review: PageReview) -> Path | None:
    """Where the review's replay screenshot is, if it is still there."""
    if not review.replay_shot:
        return None
    path = settings.data_dir / review.replay_shot
    return path if path.is_file() else None

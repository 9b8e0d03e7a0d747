"""Watching a browser crawl live (the admin's "watch", as Browsertrix's "watch crawl"): each
tab's viewport as a small JPEG every FRAME_INTERVAL, kept in the crawl's Redis database.

Frames are taken only while someone watches: the admin sets WATCH_KEY with a short expiry
each time it reads the frames, and a tab looks at it once per FRAME_INTERVAL, so a crawl
nobody watches pays one GET every two seconds per instance and draws nothing. Each tab slot
has one key (FRAME_KEY), overwritten by its next frame and gone FRAME_TTL seconds after its
last: what Redis holds is bounded by the tabs of the crawl times MAX_FRAME. A frame that
cannot be taken or kept is skipped, never an error of the page.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING

from archiver_crawler.browser.cdp import BrowserGone, ProtocolError
from archiver_crawler.browser.shots import shot_params

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from archiver_crawler.browser.page import Tab

logger = logging.getLogger(__name__)

FRAME_INTERVAL = 2.0  # seconds between two frames of a tab
FRAME_TTL = 10  # seconds a frame is kept after the tab's last
JPEG_QUALITY = 50
MAX_FRAME = 256 << 10  # bytes of one JPEG; a larger one is not kept
FRAME_TIMEOUT = 5.0  # seconds for Chromium to draw one

# The admin's side reads the same names (crawls/screencast.py).
WATCH_KEY = "{crawl}:screencast:watch"
FRAME_KEY = "{crawl}:screencast:{instance}:{pid}:{slot}"


class Screencast:
    """The frames of one crawler process's tabs, kept in the crawl's Redis."""

    def __init__(self, redis: aioredis.Redis, crawl_id: str, instance_id: str):
        self.redis = redis
        self.crawl_id = crawl_id
        self.instance_id = instance_id
        self._watched = False
        self._looked_at = float("-inf")
        self._look = asyncio.Lock()

    async def watched(self) -> bool:
        """Whether someone watches now, asked of Redis at most once per FRAME_INTERVAL."""
        async with self._look:
            if time.monotonic() - self._looked_at >= FRAME_INTERVAL:
                self._looked_at = time.monotonic()
                try:
                    self._watched = bool(await self.redis.exists(WATCH_KEY.format(crawl=self.crawl_id)))
                except Exception as exc:  # noqa: BLE001 - the crawl's own Redis calls say it
                    logger.debug("screencast: watch flag not read: %s", exc)
                    self._watched = False
            return self._watched

    def key(self, slot: int) -> str:
        return FRAME_KEY.format(crawl=self.crawl_id, instance=self.instance_id, pid=os.getpid(), slot=slot)

    async def publish(self, slot: int, url: str, jpeg: bytes) -> None:
        if len(jpeg) > MAX_FRAME:
            return
        frame = json.dumps({"url": url, "ts": time.time(), "jpeg": base64.b64encode(jpeg).decode()})
        try:
            await self.redis.set(self.key(slot), frame, ex=FRAME_TTL)
        except Exception as exc:  # noqa: BLE001 - a frame is never worth a page
            logger.debug("screencast: frame not kept: %s", exc)

    async def cast(self, tab: Tab, slot: int, url: str) -> None:
        """Frames of `tab` while it lives (cancelled by its engine when the page is done)."""
        while True:
            if await self.watched():
                jpeg = await frame(tab)
                if jpeg:
                    await self.publish(slot, url, jpeg)
            await asyncio.sleep(FRAME_INTERVAL)


async def frame(tab: Tab) -> bytes | None:
    """The tab's viewport, cut to 16:9 and drawn at 640x360 as a JPEG; None if it cannot be."""
    if not tab.session:
        return None
    try:
        metrics = await tab.cdp.send("Page.getLayoutMetrics", session=tab.session, timeout=FRAME_TIMEOUT)
        box = metrics.get("cssLayoutViewport") or {}
        viewport = (float(box.get("clientWidth") or 1), float(box.get("clientHeight") or 1))
        params = {**shot_params("thumbnail", viewport, viewport), "quality": JPEG_QUALITY}
        answer = await tab.cdp.send("Page.captureScreenshot", params, session=tab.session,
                                    timeout=FRAME_TIMEOUT)
        return base64.b64decode(answer["data"])
    except (ProtocolError, BrowserGone, KeyError, ValueError, TypeError) as exc:
        logger.debug("screencast: no frame: %s", exc)
        return None


@contextlib.asynccontextmanager
async def casting(screencast: Screencast | None, tab: Tab, slot: int, url: str):
    """Frames of `tab` for as long as the block runs (nothing without a screencast)."""
    task = asyncio.get_running_loop().create_task(screencast.cast(tab, slot, url)) if screencast else None
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            # wait() neither raises the task's end nor absorbs a cancellation of our own.
            await asyncio.wait([task], timeout=FRAME_TIMEOUT)

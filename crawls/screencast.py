"""A browser crawl watched live: the frames its tabs keep in the crawl's Redis database while
someone watches (crawler/archiver_crawler/browser/screencast.py says how and how bounded).

Reading the frames is what asks for them: each read sets the watch flag for WATCH_TTL
seconds, so the crawler draws frames only while a watch page is open and polling. A frame
is passed on only if it decodes to a JPEG of at most MAX_FRAME bytes: what a crawler wrote
is not trusted to be an image.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import logging
import time

from archiver_crawler.browser.screencast import FRAME_KEY, MAX_FRAME, WATCH_KEY

from crawls.metrics import REDIS_TIMEOUT, redis_endpoint

log = logging.getLogger(__name__)

WATCH_TTL = 10  # seconds a read keeps the crawler drawing frames
MAX_TABS = 64  # frames read at most (a crawl's tabs: its scale times its workers)
JPEG = b"\xff\xd8\xff"


def frames(crawl, now: float | None = None) -> tuple[list[dict], str]:
    """The crawl's newest frame of each tab, oldest tab first, and why there are none if so."""
    if crawl.redis_db is None:
        return [], "The crawl is not running now: frames come once it runs."
    now = time.time() if now is None else now
    try:
        endpoint = redis_endpoint()
        if endpoint is None:
            return [], "No Redis is recorded on this host (the daemon has not started one)."
        with endpoint.client(crawl.redis_db, timeout=REDIS_TIMEOUT) as client:
            client.set(WATCH_KEY.format(crawl=crawl.id), "1", ex=WATCH_TTL)
            pattern = FRAME_KEY.format(crawl=crawl.id, instance="*", pid="*", slot="*")
            names = sorted(itertools.islice(client.scan_iter(match=pattern, count=500), MAX_TABS))
            values = client.mget(names) if names else []
    except Exception as exc:  # noqa: BLE001 - the page says Redis cannot be read, nothing fails
        log.info("screencast of %s not read: %s", crawl.id, type(exc).__name__)
        return [], f"Redis cannot be read now ({type(exc).__name__}); trying again."
    shown = []
    for name, value in zip(names, values, strict=True):
        frame = checked(value)
        if frame is not None:
            instance, _pid, slot = name.rsplit(":", 3)[1:]
            shown.append({"tab": f"instance {instance.rsplit('-', 1)[-1]}, tab {int(slot) + 1}",
                          "url": frame["url"],
                          "age": max(0, round(now - frame["ts"])),
                          "src": "data:image/jpeg;base64," + frame["jpeg"]})
    return shown, "" if shown else ("No frame yet: the first comes within a few seconds of watching "
                                    "(archiver's own crawler in browser mode draws them).")


def checked(value: str | None) -> dict | None:
    try:
        frame = json.loads(value) if value else None
        if not isinstance(frame, dict):
            return None
        data = base64.b64decode(frame["jpeg"], validate=True)
        if not data.startswith(JPEG) or len(data) > MAX_FRAME:
            return None
        return {"url": str(frame["url"]), "ts": float(frame["ts"]), "jpeg": frame["jpeg"]}
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None

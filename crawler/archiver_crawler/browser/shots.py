"""Screenshots of a page, as browsertrix-crawler's --screenshot names them and records them:
each a `resource` record `urn:<kind>:<url>` of its image type.

- `view`: the viewport, PNG;
- `thumbnail`: the viewport cut to 16:9 from its top left and scaled to 640x360, JPEG;
- `fullPage`, `fullPageFinal`: the whole page (up to MAX_FULL_HEIGHT pixels), PNG.

Chromium draws each at the size asked for (a clip with a scale): no image library is needed.
A screenshot that fails is left out and said in the log, as the real crawler does.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

from archiver_crawler.browser.cdp import Connection, ProtocolError

logger = logging.getLogger(__name__)

MIME = {"view": "image/png", "thumbnail": "image/jpeg", "fullPage": "image/png",
        "fullPageFinal": "image/png"}
THUMBNAIL_WIDTH, THUMBNAIL_HEIGHT = 640, 360
JPEG_QUALITY = 80
MAX_FULL_HEIGHT = 16_384  # Chromium's largest texture: a longer page is cut there


@dataclass(frozen=True)
class Shot:
    kind: str  # a key of MIME
    data: bytes

    @property
    def mime(self) -> str:
        return MIME[self.kind]


def shot_params(kind: str, viewport: tuple[float, float], content: tuple[float, float]) -> dict:
    """Page.captureScreenshot's parameters for `kind`, given the viewport's and the content's
    CSS size (width, height)."""
    width, height = viewport
    if kind == "thumbnail":
        cut_height = min(height, width * THUMBNAIL_HEIGHT / THUMBNAIL_WIDTH)
        cut_width = cut_height * THUMBNAIL_WIDTH / THUMBNAIL_HEIGHT
        return {"format": "jpeg", "quality": JPEG_QUALITY, "clip": {
            "x": 0, "y": 0, "width": cut_width, "height": cut_height,
            "scale": THUMBNAIL_WIDTH / cut_width}}
    if kind in ("fullPage", "fullPageFinal"):
        full_width, full_height = max(width, content[0]), min(max(height, content[1]), MAX_FULL_HEIGHT)
        return {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": full_width, "height": full_height, "scale": 1}}
    return {"format": "png"}


async def take(cdp: Connection, session: str, kinds: tuple[str, ...]) -> list[Shot]:
    """The screenshots of `kinds` (unknown ones skipped) of the page in `session`."""
    try:
        metrics = await cdp.send("Page.getLayoutMetrics", session=session, timeout=30)
    except ProtocolError as exc:
        logger.warning("no screenshot: cannot measure the page: %s", exc)
        return []
    viewport = _size(metrics.get("cssLayoutViewport"), "clientWidth", "clientHeight")
    content = _size(metrics.get("cssContentSize"), "width", "height")
    shots = []
    for kind in dict.fromkeys(k for k in kinds if k in MIME):
        try:
            answer = await cdp.send("Page.captureScreenshot", shot_params(kind, viewport, content),
                                    session=session, timeout=30)
        except ProtocolError as exc:
            logger.warning("screenshot %s failed: %s", kind, exc)
            continue
        shots.append(Shot(kind, base64.b64decode(answer["data"])))
    return shots


def _size(box: object, width: str, height: str) -> tuple[float, float]:
    box = box if isinstance(box, dict) else {}
    return float(box.get(width) or 1), float(box.get(height) or 1)

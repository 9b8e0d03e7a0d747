"""The text of a page's frames, so that what a visitor reads in an iframe is in the page's
text (and found by search).

A frame in the page's own renderer is read in an isolated world of its own (the page's
scripts cannot see or change that reading); a frame Chromium runs in another process (a
cross-site iframe) is a target of its own, attached like every frame (page.py), and read in
its session. At most MAX_FRAMES frames are read, each within FRAME_TIMEOUT.
"""

from __future__ import annotations

import logging

from archiver_crawler.browser.cdp import Connection, ProtocolError

logger = logging.getLogger(__name__)

MAX_FRAMES = 50
FRAME_TIMEOUT = 10.0
WORLD = "archiver-text"
_TEXT = "document.body ? document.body.innerText : ''"


async def frame_texts(cdp: Connection, session: str, frame_sessions: list[str]) -> list[str]:
    """The non-empty text of each frame below the page of `session`, in document order, then
    that of each out-of-process frame's session."""
    texts = []
    for frame_id in (await _child_frames(cdp, session))[:MAX_FRAMES]:
        try:
            world = await cdp.send("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": WORLD},
                                   session=session, timeout=FRAME_TIMEOUT)
        except ProtocolError:  # an out-of-process frame (read below), or gone meanwhile
            continue
        texts.append(await _text(cdp, session, {"contextId": world["executionContextId"]}))
    for frame_session in frame_sessions[:max(MAX_FRAMES - len(texts), 0)]:
        texts.append(await _text(cdp, frame_session, {}))
    return [text for text in texts if text.strip()]


async def _child_frames(cdp: Connection, session: str) -> list[str]:
    try:
        tree = await cdp.send("Page.getFrameTree", session=session, timeout=FRAME_TIMEOUT)
    except ProtocolError as exc:
        logger.warning("cannot list the page's frames: %s", exc)
        return []
    found: list[str] = []
    pending = list(reversed(tree.get("frameTree", {}).get("childFrames") or []))
    while pending and len(found) < MAX_FRAMES:
        node = pending.pop()
        frame_id = (node.get("frame") or {}).get("id")
        if isinstance(frame_id, str):
            found.append(frame_id)
        pending.extend(reversed(node.get("childFrames") or []))
    return found


async def _text(cdp: Connection, session: str, where: dict) -> str:
    try:
        answer = await cdp.send("Runtime.evaluate", {"expression": _TEXT, "returnByValue": True, **where},
                                session=session, timeout=FRAME_TIMEOUT)
    except ProtocolError as exc:  # the frame navigated or closed meanwhile
        logger.debug("cannot read a frame's text: %s", exc)
        return ""
    value = (answer.get("result") or {}).get("value")
    return value if isinstance(value, str) and "exceptionDetails" not in answer else ""

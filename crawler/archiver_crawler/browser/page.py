"""One page in its own tab: every request intercepted and made by archiver, waits, behaviors,
and what the live DOM holds afterwards (its frames' text included: frames.py).

The tab's session, and the session of every frame or worker it starts (auto-attached
paused, so none runs before its requests are intercepted), enables `Fetch` for all URLs
at the request stage: Chromium never sends a request itself. Each paused request goes to
the Exchanger (address policy, archiver's HTTP client, exact bytes kept) and is answered
with `Fetch.fulfillRequest`, or `Fetch.failRequest` when it was refused or failed. A
redirect is answered as it came (3xx with its Location): Chromium follows it with a new
paused request, so every hop is its own exchange.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from archiver_crawler.browser.capture import LoadState, PageCapture, Resource
from archiver_crawler.browser.cdp import CommandTimeout, Connection, ProtocolError
from archiver_crawler.browser.frames import frame_texts
from archiver_crawler.browser.network import Exchanger, for_browser
from archiver_crawler.browser.shots import take as take_screenshots
from archiver_crawler.fetch import FetchError, FetchRefused

logger = logging.getLogger(__name__)

# --waitUntil values (browsertrix-crawler's, from puppeteer) -> Chromium's lifecycle events.
LIFECYCLE = {"load": "load", "domcontentloaded": "DOMContentLoaded",
             "networkidle0": "networkIdle", "networkidle2": "networkAlmostIdle"}
BEHAVIORS = ("autoscroll", "autoplay")

_EXTRACT = """(() => {
  const links = new Set();
  for (const a of document.querySelectorAll('a[href], area[href]'))
    if (typeof a.href === 'string') links.add(a.href);
  for (const a of document.links) if (typeof a.href === 'string') links.add(a.href);
  return {links: [...links], title: document.title || '',
          text: document.body ? document.body.innerText : ''};
})()"""

# Scrolls a screen at a time until the page stops growing (three looks at the bottom) or
# the time is up, then back to the top for the screenshot.
_AUTOSCROLL = """(async (ms) => {
  const end = Date.now() + ms; let atBottom = 0;
  while (Date.now() < end && atBottom < 3) {
    window.scrollBy(0, window.innerHeight);
    await new Promise(r => setTimeout(r, 150));
    const el = document.scrollingElement || document.documentElement;
    atBottom = (window.scrollY + window.innerHeight >= el.scrollHeight - 2) ? atBottom + 1 : 0;
  }
  window.scrollTo(0, 0);
})"""

# Starts every audio and video element (muted) and waits until each can play through,
# ended or failed, or the time is up: what it loaded is then archived.
_AUTOPLAY = """(async (ms) => {
  const media = [...document.querySelectorAll('video, audio')];
  for (const m of media) { m.muted = true; try { await m.play(); } catch (e) {} }
  const end = Date.now() + ms;
  while (Date.now() < end && media.some(m => !m.ended && !m.error && m.readyState < 4))
    await new Promise(r => setTimeout(r, 100));
})"""


@dataclass(frozen=True)
class PageOptions:
    wait_until: tuple[str, ...] = ("load", "networkidle2")  # browsertrix-crawler's default
    page_load_timeout: float = 90.0
    post_load_delay: float = 0.0
    behaviors: tuple[str, ...] = ()
    behavior_timeout: float = 10.0
    screenshots: tuple[str, ...] = ()  # shots.MIME's kinds
    settle_timeout: float = 5.0  # for requests still running when the page is read
    viewport: tuple[int, int] | None = None  # (width, height) in CSS pixels; None: the window's


class Tab:
    """A tab opened for one page; `capture(url)` once, then `close()`."""

    def __init__(self, connection: Connection, exchanger: Exchanger, options: PageOptions):
        self.cdp = connection
        self.exchanger = exchanger
        self.options = options
        self.target_id = ""
        self.session = ""
        self._sessions: list[str] = []
        self._frame_sessions: list[str] = []  # out-of-process iframes (frames.py)
        self._requests: set[asyncio.Task] = set()
        self._lifecycle: set[tuple[str, str]] = set()
        self._changed = asyncio.Event()
        self.crashed = ""
        self.result: PageCapture | None = None

    async def open(self) -> None:
        target = await self.cdp.send("Target.createTarget", {"url": "about:blank"})
        self.target_id = target["targetId"]
        attached = await self.cdp.send("Target.attachToTarget",
                                       {"targetId": self.target_id, "flatten": True})
        self.session = attached["sessionId"]
        await self._prepare(self.session)
        for method in ("Page.enable", "Runtime.enable"):
            await self.cdp.send(method, session=self.session)
        if self.options.viewport:
            width, height = self.options.viewport
            await self.cdp.send("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=self.session)
        await self.cdp.send("Page.setLifecycleEventsEnabled", {"enabled": True},
                            session=self.session)

    async def _prepare(self, session: str) -> None:
        """Intercept every request of `session` and auto-attach its frames and workers."""
        self._sessions.append(session)
        self.cdp.on_events(session, lambda method, params: self._on_event(session, method, params))
        await self.cdp.send("Fetch.enable", {"patterns": [
            {"urlPattern": "*", "requestStage": "Request"}]}, session=session)
        await self.cdp.send("Target.setAutoAttach", {
            "autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
            session=session)

    async def close(self) -> None:
        for task in self._requests:
            task.cancel()
        for session in self._sessions:
            self.cdp.on_events(session, None)
        if self.target_id:
            with contextlib.suppress(ProtocolError):  # gone: crashed, or closed by the page
                await self.cdp.send("Target.closeTarget", {"targetId": self.target_id},
                                    timeout=5)

    # events

    def _on_event(self, session: str, method: str, params: dict[str, Any]) -> None:
        if method == "Fetch.requestPaused":
            task = asyncio.get_running_loop().create_task(self._answer(session, params))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)
        elif method == "Page.lifecycleEvent" and params.get("frameId") == self.target_id:
            self._lifecycle.add((params.get("loaderId", ""), params.get("name", "")))
            self._changed.set()
        elif method == "Target.attachedToTarget":
            if (params.get("targetInfo") or {}).get("type") == "iframe":
                self._frame_sessions.append(params["sessionId"])
            asyncio.get_running_loop().create_task(self._attach_child(params["sessionId"]))
        elif method == "Runtime.exceptionThrown" and session == self.session and self.result:
            self.result.js_errors += 1
        elif method == "Page.javascriptDialogOpening":
            self.cdp.notify("Page.handleJavaScriptDialog", {"accept": False}, session=session)
        elif method == "Inspector.targetCrashed" and session == self.session:
            self.crashed = "the page's renderer crashed"
            self._changed.set()

    async def _attach_child(self, session: str) -> None:
        try:
            await self._prepare(session)
            await self.cdp.send("Runtime.runIfWaitingForDebugger", session=session)
        except ProtocolError as exc:  # the frame or worker ended meanwhile
            logger.debug("cannot prepare a child target: %s", exc)

    async def _answer(self, session: str, params: dict[str, Any]) -> None:
        request = params["request"]
        resource = Resource(request["url"], params.get("resourceType", "Other"),
                            params.get("frameId", ""))
        if self.result is not None:
            self.result.resources.append(resource)
        try:
            resource.exchange = await self.exchanger.exchange(
                request["method"], request["url"], request.get("headers", {}), _post_data(request))
        except FetchRefused as exc:
            resource.error, resource.refused = str(exc), True
        except FetchError as exc:
            resource.error = str(exc)
        try:
            await self._respond(session, params["requestId"], resource)
        except ProtocolError as exc:  # the request was cancelled by the page meanwhile
            logger.debug("cannot answer %s: %s", resource.url, exc)

    async def _respond(self, session: str, request_id: str, resource: Resource) -> None:
        if resource.exchange is None:
            reason = "AddressUnreachable" if resource.refused else "ConnectionFailed"
            await self.cdp.send("Fetch.failRequest",
                                {"requestId": request_id, "errorReason": reason}, session=session)
            return
        answer = for_browser(resource.exchange)
        params = {"requestId": request_id, "responseCode": answer.status,
                  "responseHeaders": [{"name": k, "value": v} for k, v in answer.headers],
                  "body": base64.b64encode(answer.body).decode("ascii")}
        if answer.reason:
            params["responsePhrase"] = answer.reason
        await self.cdp.send("Fetch.fulfillRequest", params, session=session)

    # the page

    async def capture(self, url: str) -> PageCapture:
        """Load `url`, wait, run behaviors, read links and text; never raises for the page's
        own failures (they are the result's `error`), only BrowserGone for the browser's."""
        self.result = result = PageCapture(url=url, ts=datetime.now(UTC),
                                           target_id=self.target_id)
        loaded = await self._load(url, result)
        if loaded:
            await self._after_load(result)
        await self._settle()
        return result

    async def _load(self, url: str, result: PageCapture) -> bool:
        timeout = self.options.page_load_timeout
        try:
            # Answered once the document's response came (or the navigation failed).
            navigated = await self.cdp.send("Page.navigate", {"url": url}, session=self.session,
                                            timeout=timeout)
        except CommandTimeout:
            result.error = f"the page did not load within {timeout:g} s"
            return False
        except ProtocolError as exc:
            result.error = f"cannot load the page: {exc}"
            return False
        if navigated.get("errorText"):
            main = result.main
            result.error = (main.error if main and main.error else
                            f"the page did not load: {navigated['errorText']}")
            return False
        loader = navigated.get("loaderId", "")
        if not loader or navigated.get("isDownload"):
            result.load_state = LoadState.FULL_PAGE_LOADED  # not a document a tab shows
            return False
        events = {LIFECYCLE.get(w, "load") for w in self.options.wait_until} or {"load"}
        if not await self._wait_for({(loader, "DOMContentLoaded")}, timeout):
            result.error = self.crashed or f"the page did not load within {timeout:g} s"
            return False
        result.load_state = LoadState.CONTENT_LOADED
        if await self._wait_for({(loader, name) for name in events}, timeout):
            result.load_state = LoadState.FULL_PAGE_LOADED
        elif self.crashed:
            result.error = self.crashed
            return False
        else:  # loaded enough to read, as browsertrix-crawler does after its timeout
            logger.warning("page %s: %s not reached within %g s", url,
                           ",".join(sorted(events)), timeout)
        return True

    async def _wait_for(self, wanted: set[tuple[str, str]], timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not wanted <= self._lifecycle:
            if self.crashed:
                return False
            self._changed.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._changed.wait()
            except TimeoutError:
                return False
        return True

    async def _after_load(self, result: PageCapture) -> None:
        if self.options.post_load_delay:
            await asyncio.sleep(self.options.post_load_delay)  # the option asks for a delay
        await self.run_behaviors()
        extracted = await self.evaluate(_EXTRACT)
        if isinstance(extracted, dict):
            result.links = [link for link in extracted.get("links", [])
                            if isinstance(link, str)]
            result.title = str(extracted.get("title", ""))
            framed = await frame_texts(self.cdp, self.session, self._frame_sessions)
            result.text = "\n\n".join([str(extracted.get("text", "")), *framed])
            result.load_state = max(result.load_state, LoadState.EXTRACTION_DONE)
        if self.options.behaviors:
            result.load_state = max(result.load_state, LoadState.BEHAVIORS_DONE)
        if self.options.screenshots:
            result.screenshots = await take_screenshots(self.cdp, self.session, self.options.screenshots)

    async def run_behaviors(self) -> None:
        """Each behavior asked for, bounded by `behavior_timeout` (its script stops itself)."""
        ms = int(self.options.behavior_timeout * 1000)
        for name in self.options.behaviors:
            script = {"autoscroll": _AUTOSCROLL, "autoplay": _AUTOPLAY}.get(name)
            if script is not None:
                await self.evaluate(f"{script}({ms})", timeout=self.options.behavior_timeout + 5)

    async def evaluate(self, expression: str, timeout: float = 30) -> Any:
        """The value of `expression` (awaited if a promise), or None if it threw."""
        try:
            answer = await self.cdp.send("Runtime.evaluate", {
                "expression": expression, "returnByValue": True, "awaitPromise": True},
                session=self.session, timeout=timeout)
        except ProtocolError as exc:
            logger.warning("script failed on %s: %s", self.result and self.result.url, exc)
            return None
        if "exceptionDetails" in answer:
            return None
        return answer.get("result", {}).get("value")

    async def _settle(self) -> None:
        """Let requests still in flight finish (bounded): their records belong to the page."""
        pending = set(self._requests)
        if pending:
            await asyncio.wait(pending, timeout=self.options.settle_timeout)


def _post_data(request: dict[str, Any]) -> bytes | None:
    entries = request.get("postDataEntries")
    if entries:
        return b"".join(base64.b64decode(e.get("bytes", "")) for e in entries)
    if request.get("postData") is not None:
        return str(request["postData"]).encode("utf-8")
    return None



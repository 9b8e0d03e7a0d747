"""The Chrome DevTools Protocol over the pipe Chromium opens with --remote-debugging-pipe.

Messages are JSON objects, each ended by a NUL byte: Chromium reads commands from its fd 3
and writes answers and events to its fd 4. A pipe rather than a WebSocket: no TCP port
that any local process could connect to and drive the browser with, and no client library.

`Connection.send(method, params, session=...)` awaits a command's result; events go to the
handler registered for their session (flat sessions: `Target.attachToTarget` with
`flatten`, every message of a target carries its `sessionId`). When the pipe closes (the
browser died) every pending and later command raises BrowserGone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]
_READ_CHUNK = 1 << 20


class BrowserGone(ConnectionError):
    """The browser's pipe closed or it stopped answering: it crashed, hung or was killed."""


class CommandTimeout(BrowserGone):
    """No answer within the command's timeout: the browser may be hung, or the command
    (Page.navigate to a slow server) just slow; the caller knows which it can be."""


class ProtocolError(Exception):
    """Chromium answered a command with an error (`{"error": {"message": ...}}`)."""


class Connection:
    """One CDP pipe: commands by id, events dispatched by session id ("" = the browser)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.WriteTransport):
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._handlers: dict[str, Handler] = {}
        self.closed: asyncio.Event = asyncio.Event()
        self.close_reason = ""
        self._task = asyncio.get_running_loop().create_task(self._read_loop(), name="cdp-read")

    def on_events(self, session: str, handler: Handler | None) -> None:
        """Send `session`'s events to `handler(method, params)`; None stops them."""
        if handler is None:
            self._handlers.pop(session, None)
        else:
            self._handlers[session] = handler

    async def send(self, method: str, params: dict | None = None, session: str = "",
                   timeout: float = 30.0) -> dict[str, Any]:
        """The result of one command; ProtocolError if Chromium refused it, BrowserGone
        if the browser is gone or did not answer within `timeout` seconds."""
        if self.closed.is_set():
            raise BrowserGone(self.close_reason or "the browser's pipe is closed")
        message_id = next(self._ids)
        message: dict[str, Any] = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future = asyncio.get_running_loop().create_future()
        self._pending[message_id] = future
        try:
            self._writer.write(json.dumps(message).encode() + b"\0")
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise CommandTimeout(f"no answer to {method} within {timeout:g} s") from None
        finally:
            self._pending.pop(message_id, None)

    def notify(self, method: str, params: dict | None = None, session: str = "") -> None:
        """Send a command whose answer nobody waits for (answers to unknown ids are dropped)."""
        if not self.closed.is_set():
            message: dict[str, Any] = {"id": next(self._ids), "method": method,
                                       "params": params or {}}
            if session:
                message["sessionId"] = session
            self._writer.write(json.dumps(message).encode() + b"\0")

    async def _read_loop(self) -> None:
        buffer = bytearray()
        try:
            while True:
                chunk = await self._reader.read(_READ_CHUNK)
                if not chunk:
                    break
                buffer += chunk
                while (end := buffer.find(b"\0")) >= 0:
                    raw = bytes(buffer[:end])
                    del buffer[:end + 1]
                    self._dispatch(json.loads(raw))
            reason = "the browser closed its pipe (it exited or crashed)"
        except (OSError, ValueError) as exc:
            reason = f"the browser's pipe failed: {exc}"
        self._close(reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            future = self._pending.get(message["id"])
            if future is None or future.done():
                return
            if "error" in message:
                future.set_exception(ProtocolError(message["error"].get("message", "error")))
            else:
                future.set_result(message.get("result", {}))
            return
        handler = self._handlers.get(message.get("sessionId", ""))
        if handler is not None:
            try:
                handler(message.get("method", ""), message.get("params", {}))
            except Exception:  # noqa: BLE001 - one bad handler must not end the connection
                logger.exception("CDP event handler failed for %s", message.get("method"))

    def _close(self, reason: str) -> None:
        if self.closed.is_set():
            return
        self.close_reason = reason
        self.closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(BrowserGone(reason))
        self._pending.clear()
        self._writer.close()

    async def close(self) -> None:
        self._close("closed by archiver")
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

"""What the runner's steps share: the Runtime (its parts and the leases it holds) and Held.

Steps are functions of a Runtime (`step(rt, now) -> found work`), so a test builds one
Runtime with a fake launcher and an in-memory store and calls any step on its own.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from archiver.conf import Settings
from crawls import admission
from crawls.models import Crawl, CrawlLog

if TYPE_CHECKING:  # annotations only: the launchers and the store never need the Runtime
    from runner.launchers.base import Instance, Launcher
    from runner.outage import Absence
    from runner.progress import Flag, ProgressStore

log = logging.getLogger("runner.daemon")


@dataclass
class Held:
    """What we remember about a crawl whose lease we hold (the rest is in its row)."""

    token: int
    renewed_at: dt.datetime
    counted_at: dt.datetime | None = None
    flags: set[Flag] = field(default_factory=set)  # commands to all its crawlers sent in this lease
    # Instances asked to stop on their own (`:stopone`: scaled away) in this lease, by number.
    stopping_instances: set[int] = field(default_factory=set)
    # Old crawlers of an adopted crawl asked to stop (its handover), by host name: they ran
    # with another runner, under whatever names its Redis database holds.
    stopping_old_hosts: set[str] = field(default_factory=set)
    redis_down_since: dt.datetime | None = None
    corrupt_since: dt.datetime | None = None  # its progress keys could not be read
    engine_down: bool = False
    files_bytes: int | None = None  # sizes of its kept files, read once per lease
    canceled_at: dt.datetime | None = None  # when we sent the cancel command
    pause_reason: str = ""  # why the runner itself paused it (a full disk)
    failed_read: int | None = None  # entries of <id>:f already stored as failed snapshots
    errors: int = 0  # unexpected errors in a row; backs off, then fails the crawl
    backoff_until: dt.datetime | None = None
    granted: bool = False  # its Redis credentials exist on the server (lost with a restart)
    handover_until: dt.datetime | None = None  # adopted from a dead home: runner/handover.py
    redis_measured_at: dt.datetime | None = None  # when its Redis database was last measured


class Episodes:
    """Warnings said once per episode: a key is warned about until it is cleared."""

    def __init__(self):
        self._open: set[str] = set()

    def begin(self, key: str) -> bool:
        """True the first time `key` goes wrong (say it now), False while it stays wrong."""
        if key in self._open:
            return False
        self._open.add(key)
        return True

    def end(self, key: str) -> bool:
        """True when `key` was wrong and is fine again."""
        if key not in self._open:
            return False
        self._open.discard(key)
        return True

    def is_open(self, key: str) -> bool:
        return key in self._open


def new_runner_id() -> str:
    return f"{os.uname().nodename[:40]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass
class Runtime:
    """The runner's parts and the state steps share across ticks."""

    settings: Settings
    launcher: Launcher
    store: ProgressStore
    id: str
    clock: Callable[[], dt.datetime]
    host_check: Callable[[Crawl], str | None]
    disk_check: Callable[[], str | None]
    host_usage: Callable[[], admission.HostUsage]
    on_redis_down: Callable[[], None] | None = None
    held: dict[str, Held] = field(default_factory=dict)
    seen: dict[str, Crawl] = field(default_factory=dict)  # held crawls as last read (live view)
    listed: dict[str, Instance] | None = None  # this tick's instances by ref; None = engine away
    disk_reason: str | None = None  # this tick's answer of disk_check()
    redis_pressed: tuple[dt.datetime, bool] | None = None  # (tick, Redis over PRESSURE_SHARE of maxmemory)
    events: deque = field(default_factory=lambda: deque(maxlen=50))
    episodes: Episodes = field(default_factory=Episodes)
    launcher_outage: Absence | None = None  # the Docker engine away (steps/recover.py)
    count_every: float = 15.0
    redis_grace: float = 300.0
    corrupt_grace: float = 30.0
    cancel_grace: float = 30.0
    stopping: bool = False  # the loop was asked to stop: claim nothing new
    stop_event: threading.Event = field(default_factory=threading.Event)  # set by a signal
    tick_started: float = 0.0  # time.monotonic() when this tick began

    def event(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        self.events.append(message)

    def note(self, crawl: Crawl, message: str, level: str = "info",
             now: dt.datetime | None = None, **details) -> None:
        """A line in the crawl's own log (and ours)."""
        self.tell(crawl, message, level, now, **details)
        self.event(f"crawl {crawl.short_id}: {message}",
                   logging.WARNING if level in ("warning", "error") else logging.INFO)

    def tell(self, crawl: Crawl, message: str, level: str = "info",
             now: dt.datetime | None = None, **details) -> None:
        """A line in the crawl's own log only, for what ours says once for every crawl (the
        Docker engine away)."""
        CrawlLog.objects.create(crawl_id=crawl.pk, level=level, source="runner", message=message,
                                details=details, created_at=now or self.clock())

    def hands_off(self, pk: str, why: str) -> None:
        """Forget a crawl whose lease we lost; change nothing more about it."""
        held = self.held.pop(pk, None)
        if held:
            self.event(f"crawl {pk[:8]}: hands off ({why})", logging.WARNING)

    def save(self, crawl: Crawl, now: dt.datetime, **fields) -> bool:
        """Write `fields` with our token through the model; a refusal means the lease is gone."""
        held = self.held.get(crawl.pk)
        if held is None or not crawl.record_progress(held.token, now, **fields):
            self.hands_off(crawl.pk, "an update was refused")
            return False
        return True

    def set_waiting_reason(self, crawl: Crawl, reason: str, now: dt.datetime) -> None:
        if crawl.waiting_reason != reason:
            self.save(crawl, now, waiting_reason=reason[:300])

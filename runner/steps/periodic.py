"""The steps after supervision: schedules, retention, disk resume, Redis databases left over,
change alerts.

Each is `step(rt, now) -> found work`; the Runner keeps them as a list of (name, step).
"""

from __future__ import annotations

import contextlib
import datetime as dt

from archiver.errors import ArchiverError
from crawls import admission, alerts, dedup, retention, schedules, storage
from crawls.models import Crawl
from runner import ending, indexing
from runner.observe import files_bytes
from runner.polling import PollingThreads
from runner.state import Runtime

PURGE_EVERY = 60.0  # retention looks for expired crawls this often
PURGE_AGAIN = 1.0  # ... or this soon when its last pass had a full batch or more


def fire_schedules(rt: Runtime, now: dt.datetime) -> bool:
    """Queue the crawls of due schedules (docs/lifecycle.md §5)."""
    if rt.stopping:
        return False
    return schedules.fire_due_schedules(rt.id, now)


class Retention:
    """Retention, at most once a minute, or again soon while there is more to delete."""

    def __init__(self):
        self.next_purge: dt.datetime | None = None

    def __call__(self, rt: Runtime, now: dt.datetime) -> bool:
        if self.next_purge is not None and now < self.next_purge:
            return False
        found = retention.purge_expired(now, settings=rt.settings)
        self.next_purge = now + dt.timedelta(seconds=PURGE_AGAIN if found else PURGE_EVERY)
        return found


class ChangeAlerts:
    """Change alerts (crawls/alerts.py): at most every few seconds, or at once again while
    there were checks to make. A step of the tick in `run --once` / `--drain` only: the
    daemon runs them in a thread of their own (ChangeAlertWorker)."""

    EVERY = 5.0

    def __init__(self):
        self.next_look: dt.datetime | None = None

    def __call__(self, rt: Runtime, now: dt.datetime) -> bool:
        if rt.stopping or (self.next_look is not None and now < self.next_look):
            return False
        found = alerts.check_changes(rt.id, now, settings=rt.settings)
        self.next_look = None if found else now + dt.timedelta(seconds=self.EVERY)
        return found


class ChangeAlertWorker(PollingThreads):
    """The daemon's change alerts beside its loop: a comparison reads two crawls' archives
    and their texts, and the tick (heartbeat, claims, other orgs' crawls) never waits on it."""

    what = "change alerts pass"

    def __init__(self, settings, owner: str, clock):
        super().__init__([("change-alerts", owner)], max(settings.poll_interval, ChangeAlerts.EVERY))
        self.settings, self.clock = settings, clock

    def pass_once(self, owner: str) -> bool:
        return alerts.check_changes(owner, self.clock(), settings=self.settings)


def attach_change_alerts(rt: Runtime, mode: str, steps: list) -> ChangeAlertWorker | None:
    """The daemon's change alerts in a thread of their own; `run --once` / `--drain`'s a step."""
    if mode == "daemon":
        return ChangeAlertWorker(rt.settings, rt.id, rt.clock).start()
    change_alerts = ChangeAlerts()
    steps.append(("change alerts", lambda now: change_alerts(rt, now)))
    return None


def resume_after_disk(rt: Runtime, now: dt.datetime) -> bool:
    """Crawls the runner paused for a full disk are queued again once there is room: below
    the threshold, and free space for packaging what each holds.

    Only those: a crawl a person paused keeps an empty waiting reason and stays paused.
    """
    paused = list(Crawl.objects.paused_for_disk())
    if not paused:
        return False
    try:
        if rt.disk_check() is not None:
            return False
        free = rt.host_usage().disk_free
    except OSError:
        return False
    resumed = 0
    for crawl in paused:
        unpacked = max(crawl.size_bytes - files_bytes(crawl), 0)
        if free < admission.packaging_room(unpacked):
            continue
        with contextlib.suppress(ArchiverError):  # resumed or ended by someone meanwhile
            crawl.resume(now)
            resumed += 1
            rt.event(f"crawl {crawl.short_id}: disk space is back; resuming")
    return bool(resumed)


def release_redis_left_over(rt: Runtime, now: dt.datetime) -> bool:
    """Final crawls still holding a Redis database (a crash between finishing and
    flushing): flush and release them, so the index can be won again."""
    # Only crawls ended a while ago: the runner that finished one releases it within the
    # tick, and a flush racing that release could hit a crawl that has won the index since.
    settled = now - dt.timedelta(seconds=2 * rt.settings.lease_seconds)
    found = False
    for crawl in Crawl.objects.final_holding_redis(settled)[:20]:
        found |= ending.release_redis(rt, crawl, crawl.redis_db)
    return found


def index_pages(rt: Runtime, now: dt.datetime) -> bool:
    """The page text of one kept archive into the search index (runner/indexing.py)."""
    if rt.stopping:
        return False
    return indexing.index_next(rt.settings.data_dir, now, rt.stop_event,
                               store=storage.object_store(rt.settings))


def index_payloads(rt: Runtime, now: dt.datetime) -> bool:
    """Payload digests and dependencies of a few kept WACZs not yet indexed (docs/storage.md,
    "Deduplication"): bounded per pass, resumable (a file is marked once it is done)."""
    return bool(dedup.index_pending(rt.settings))

"""The runner: a thin loop around one-pass steps that claim, launch, supervise and finish crawls.

    runner = Runner(settings, launcher, store)
    runner.tick(now)            # recover -> claim -> supervise each held crawl -> periodic steps
    runner.run(mode="daemon")   # the loop: tick, then sleep on the wake socket

Every step does one pass and returns whether it found work; tests call the steps. Each
crawl is handled inside its own error boundary: a failure is written on the crawl and the
daemon goes on with the others. Every write to a crawl names our lease token, so a runner
that lost a crawl's lease changes nothing about it (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import threading
import zipfile
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from django.db import DatabaseError, transaction
from django.db.models import Q

from archiver.conf import Settings
from archiver.errors import ArchiverError, ConfigError, EngineUnavailable, LaunchError
from crawls import admission, quotas, retention, schedules
from crawls.lease import db_now
from crawls.models import (
    STOPPED_STATE,
    Crawl,
    CrawlFile,
    CrawlLog,
    CrawlMessage,
    CrawlStatus,
    ExitReason,
    Intent,
    Process,
    ProcessStatus,
    RunnerRecord,
    Snapshot,
    SnapshotStatus,
    StopReason,
)
from runner.launchers import CONFIG_NAME, Launcher, LaunchSpec, hostname
from runner.progress import FINISHED_STATUSES, Progress, ProgressStore

log = logging.getLogger(__name__)
S = CrawlStatus

ACTIVE_TICK = 1.0  # seconds between ticks while crawls run
ORG_RETRY = 5.0  # a crawl waiting for its org is looked at again after this
COUNT_EVERY = 15.0  # execution time is counted at least this often (and at every exit)
RELAUNCH_BASE = 1.0  # first relaunch backoff; doubles per failure, capped
RELAUNCH_CAP = 60.0
ENGINE_RETRY = 2.0  # launch again this long after the engine did not answer
REDIS_GRACE = 300.0  # Redis unreachable this long fails the crawl
CANCEL_GRACE = 30.0  # crawlers still running this long after a cancel are removed
MAX_DRAIN_BATCHES = 20  # per crawl per tick, so one busy crawl cannot starve the others
SHUTDOWN_PAUSE_TIMEOUT = 120.0
PURGE_EVERY = 60.0  # retention looks for expired crawls this often
PURGE_AGAIN = 1.0  # ... or this soon when its last pass had a full batch or more
DISK_PAUSE = "paused: disk"  # waiting_reason of crawls the runner paused for disk space

LIVE_INSTANCE = (ProcessStatus.STARTING, ProcessStatus.RUNNING)
FAILED_ATTEMPT = (ExitReason.CRASH, ExitReason.OOM)
CRAWLER_STATE = {
    "running": S.RUNNING,
    "pending-wait": S.PENDING_WAIT,
    "generate-wacz": S.GENERATE_WACZ, "generate-cdx": S.GENERATE_WACZ,
    "generate-warc": S.GENERATE_WACZ, "uploading-wacz": S.GENERATE_WACZ,
}


class CrawlFailed(ArchiverError):
    """The crawl cannot go on (a permanent crawler error, relaunches exhausted...)."""

    def __init__(self, message: str, stop_reason: str = ""):
        super().__init__(message)
        self.stop_reason = stop_reason


class RunnerBusy(ConfigError):
    """Another runner already works on this data dir."""


# --- pure decisions ------------------------------------------------------------------------


def classify_exit(code: int | None, oom: bool = False) -> str:
    """What an instance's exit code means (crawler-protocol.md, "Exit codes")."""
    if code is None:
        return ExitReason.CRASH
    if oom or code == 137:
        return ExitReason.OOM
    if code == 0:
        return ExitReason.DONE
    if code in (11, 13):
        return ExitReason.INTERRUPTED
    if code in (4, 17):
        return ExitReason.PERMANENT
    if code in (14, 15, 16):
        return ExitReason.LIMIT
    return ExitReason.CRASH


def relaunch_delay(failures: int) -> float:
    """Backoff before the next launch of an instance that failed `failures` times."""
    return 0.0 if failures <= 0 else min(RELAUNCH_BASE * 2 ** (failures - 1), RELAUNCH_CAP)


@dataclass(frozen=True)
class Outcome:
    status: str
    stop_reason: str = ""
    error: str = ""


def decide_outcome(statuses: list[str | None], *, intent: str, stop_reason: str,
                   pages_done: int, pages_found: int, has_files: bool) -> Outcome | None:
    """How a crawl ends, from its instances' statuses (one per expected instance); None = not yet.

    crawler-protocol.md: finished when every instance is done or failed; at least one done
    is a success (or the stop reason's state); none done is a failure, or canceled when a
    stop was asked for before any page was done. A pause ends when every instance is
    interrupted (or done).
    """
    if not statuses or any(s is None for s in statuses):
        return None
    if intent == Intent.PAUSE and set(statuses) <= {"interrupted", "done"} and "interrupted" in statuses:
        return Outcome(S.PAUSED)
    if not set(statuses) <= set(FINISHED_STATUSES):
        return None
    if intent == Intent.CANCEL or "canceled" in statuses:
        return Outcome(S.CANCELED, StopReason.USER)
    if "done" in statuses:
        if pages_found == 1 and not has_files:
            return Outcome(S.FAILED, stop_reason, "the crawl found one page and produced no archive")
        return Outcome(STOPPED_STATE.get(stop_reason, S.COMPLETE), stop_reason)
    if (intent == Intent.STOP or stop_reason) and pages_done == 0:
        return Outcome(S.CANCELED, stop_reason or StopReason.USER)
    return Outcome(S.FAILED, stop_reason, "every crawler instance failed")


def crawl_state_for(statuses: list[str]) -> str | None:
    """The crawl state its live instances' crawler statuses add up to (the least advanced)."""
    states = [CRAWLER_STATE[s] for s in statuses if s in CRAWLER_STATE]
    for state in (S.RUNNING, S.GENERATE_WACZ, S.PENDING_WAIT):
        if state in states:
            return state
    return None


# --- the runner ----------------------------------------------------------------------------


@dataclass
class Held:
    """What we remember about a crawl whose lease we hold (the rest is in its row)."""

    token: int
    renewed_at: dt.datetime
    counted_at: dt.datetime | None = None
    flags: set[str] = field(default_factory=set)  # Redis commands sent in this lease
    redis_down_since: dt.datetime | None = None
    engine_down: bool = False
    files_bytes: int | None = None  # sizes of its kept files, read once per lease
    canceled_at: dt.datetime | None = None  # when we sent the cancel command
    pause_reason: str = ""  # why the runner itself paused it (a full disk)
    failed_read: int | None = None  # entries of <id>:f already stored as failed snapshots


def new_runner_id() -> str:
    return f"{os.uname().nodename[:40]}-{os.getpid()}-{secrets.token_hex(3)}"


class Runner:
    def __init__(self, settings: Settings, launcher: Launcher, store: ProgressStore, *,
                 runner_id: str | None = None, clock: Callable[[], dt.datetime] = db_now,
                 host_check: Callable[[Crawl], str | None] | None = None,
                 disk_check: Callable[[], str | None] | None = None,
                 host_usage: Callable[[], admission.HostUsage] | None = None,
                 on_redis_down: Callable[[], None] | None = None, lock_file=None):
        # The default data dir is relative ("data"); crawlers run in other working directories.
        self.settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
        self.launcher = launcher
        self.store = store
        self.id = runner_id or new_runner_id()
        self.clock = clock
        self.host_usage = host_usage or (lambda: admission.read_host_usage(self.settings.data_dir))
        self.host_check = host_check or self.crawl_wait_reason
        self.disk_check = disk_check or self.disk_full_reason
        self.disk_reason: str | None = None  # this tick's answer of disk_check()
        self.count_every = COUNT_EVERY
        self.on_redis_down = on_redis_down
        self.held: dict[str, Held] = {}
        self.stop_event = threading.Event()
        self.interrupt_crawls = False
        self.redis_grace = REDIS_GRACE
        self.cancel_grace = CANCEL_GRACE
        self.events: deque[str] = deque(maxlen=50)
        self.seen: dict[str, Crawl] = {}  # the held crawls as last read, for the live view
        # Periodic steps after supervision: (name, step(now) -> found work).
        self.steps: list[tuple[str, Callable[[dt.datetime], bool]]] = [
            ("schedules", self.fire_schedules),
            ("retention", self.purge_expired),
            ("disk", self.resume_after_disk),
        ]
        self.next_purge: dt.datetime | None = None
        self.listed: dict[str, object] = {}  # this tick's instances by ref (from recover)
        self._wake: socket.socket | None = None
        self._lock_file = lock_file  # from acquire_runner_lock(), if taken already
        self._webhooks = None

    # --- identity --------------------------------------------------------------------------

    def acquire_lock(self) -> None:
        if self._lock_file is None:
            self._lock_file = acquire_runner_lock(self.settings)

    def release_lock(self) -> None:
        if self._lock_file:
            self._lock_file.close()
            self._lock_file = None

    def register(self, now: dt.datetime) -> None:
        """Record this runner; runners of this data dir on this host before us are dead
        (we hold the lock they held), so their crawls become due at once."""
        host = os.uname().nodename
        dead = list(RunnerRecord.objects.filter(hostname=host, data_dir=str(self.settings.data_dir),
                                                stopped_at__isnull=True).values_list("pk", flat=True))
        RunnerRecord.objects.filter(pk__in=dead).update(stopped_at=now)
        taken = Crawl.objects.filter(lease_owner__in=dead, retry_at__gt=now).update(retry_at=now)
        if taken:
            log.info("taking over %d crawl(s) from a runner that died (%s)", taken, ", ".join(dead))
        RunnerRecord.objects.create(id=self.id, hostname=host, pid=os.getpid(),
                                    data_dir=str(self.settings.data_dir), started_at=now,
                                    heartbeat_at=now)

    def heartbeat(self, now: dt.datetime) -> None:
        RunnerRecord.objects.filter(pk=self.id).update(heartbeat_at=now)

    # --- one tick --------------------------------------------------------------------------

    def tick(self, now: dt.datetime | None = None) -> bool:
        """One pass of every step; True when a step found new work."""
        now = now or self.clock()
        self.heartbeat(now)
        found = self.recover(now)
        if not self.stop_event.is_set():
            found |= self.claim_due_crawls(now)
        crawls = self.held_crawls()
        self.disk_reason = self.check_disk() if crawls else None
        messages = self.unsent_messages(crawls)
        processes = self.live_processes(crawls)
        # Crawls that wait for their first launch go first: a new crawl starts within the tick.
        for crawl in sorted(crawls.values(), key=lambda c: c.status != S.STARTING):
            found |= self.supervise_safely(crawl, now, processes.get(crawl.pk, []),
                                           messages.get(crawl.pk, []))
        for name, step in self.steps:
            try:
                found |= bool(step(now))
            except Exception:
                log.exception("step %s failed; going on", name)
        return found

    # --- the host ---------------------------------------------------------------------------

    def crawl_wait_reason(self, crawl: Crawl) -> str | None:
        """Why this host has no room to start `crawl` now (disk, memory), or None."""
        memory = admission.memory_needed(crawl.launch_config())
        return admission.wait_reason(self.host_usage(), self.settings.disk_threshold_percent, memory)

    def disk_full_reason(self) -> str | None:
        """Why running crawls must pause for disk space now, or None (memory is not checked)."""
        usage = self.host_usage()
        return admission.wait_reason(admission.HostUsage(usage.disk_used, usage.disk_free),
                                     self.settings.disk_threshold_percent, 0)

    def check_disk(self) -> str | None:
        """disk_check(), or None (and a warning) when the disk cannot be read: not a reason
        to pause crawls, nor to stop the loop."""
        try:
            return self.disk_check()
        except OSError as exc:
            log.warning("cannot read the disk use of %s: %s", self.settings.data_dir, exc)
            return None

    # --- periodic steps ----------------------------------------------------------------------

    def fire_schedules(self, now: dt.datetime) -> bool:
        """Queue the crawls of due schedules (docs/lifecycle.md §5)."""
        if self.stop_event.is_set():
            return False
        return schedules.fire_due_schedules(self.id, now)

    def purge_expired(self, now: dt.datetime) -> bool:
        """Retention, at most once a minute, or again soon while there is more to delete."""
        if self.next_purge is not None and now < self.next_purge:
            return False
        found = retention.purge_expired(now, settings=self.settings)
        self.next_purge = now + dt.timedelta(seconds=PURGE_AGAIN if found else PURGE_EVERY)
        return found

    def resume_after_disk(self, now: dt.datetime) -> bool:
        """Crawls the runner paused for a full disk are queued again once space returns.

        Only those: a crawl a person paused keeps an empty waiting reason and stays paused.
        """
        paused = Crawl.objects.filter(status=S.PAUSED, waiting_reason__startswith=DISK_PAUSE)
        if not paused.exists() or self.check_disk() is not None:
            return False
        resumed = 0
        for crawl in paused:
            with contextlib.suppress(ArchiverError):  # resumed or ended by someone meanwhile
                crawl.resume(now)
                resumed += 1
                self.event(f"crawl {crawl.short_id}: disk space is back; resuming")
        return bool(resumed)

    def held_crawls(self) -> dict[str, Crawl]:
        """Our crawls as they are now; those whose lease moved are let go."""
        if not self.held:
            self.seen = {}
            return {}
        crawls = Crawl.objects.filter(pk__in=list(self.held)).select_related("org").in_bulk()
        for pk in list(self.held):
            crawl = crawls.get(pk)
            if crawl is None or crawl.lease_token != self.held[pk].token or crawl.lease_owner != self.id:
                self.hands_off(pk, "its lease was taken over" if crawl else "it was deleted")
                crawls.pop(pk, None)
        self.seen = crawls
        return crawls

    def live_processes(self, crawls: dict[str, Crawl]) -> dict[str, list[Process]]:
        return by_crawl(Process.objects.filter(status__in=LIVE_INSTANCE), crawls)

    def unsent_messages(self, crawls: dict[str, Crawl]) -> dict[str, list[CrawlMessage]]:
        return by_crawl(CrawlMessage.objects.filter(sent_at__isnull=True), crawls)

    def hands_off(self, pk: str, why: str) -> None:
        held = self.held.pop(pk, None)
        if held:
            self.event(f"crawl {pk[:8]}: hands off ({why})", logging.WARNING)

    def event(self, message: str, level: int = logging.INFO) -> None:
        log.log(level, "%s", message)
        self.events.append(message)

    def note(self, crawl: Crawl, message: str, level: str = "info", now: dt.datetime | None = None,
             **details) -> None:
        """A line in the crawl's own log (and ours)."""
        CrawlLog.objects.create(crawl_id=crawl.pk, level=level, source="runner", message=message,
                                details=details, created_at=now or self.clock())
        self.event(f"crawl {crawl.short_id}: {message}",
                   logging.WARNING if level in ("warning", "error") else logging.INFO)

    # --- recovery --------------------------------------------------------------------------

    def recover(self, now: dt.datetime) -> bool:
        """Remove instances no active crawl owns; adopt refs a crash left unrecorded."""
        self.listed = {}
        try:
            instances = self.launcher.list()
        except LaunchError as exc:  # the engine is away or refuses: supervise() says so per crawl
            log.debug("cannot list instances: %s", exc)
            return False
        # supervise() reads these instead of asking the engine again for each instance
        self.listed = {instance.ref: instance for instance in instances}
        if not instances:
            return False
        crawls = Crawl.objects.in_bulk({i.crawl_id for i in instances})
        rows = Process.objects.in_bulk({i.process_id for i in instances if i.process_id})
        found = False
        for instance in instances:
            crawl, row = crawls.get(instance.crawl_id), rows.get(instance.process_id)
            if crawl is not None and crawl.lease_is_live(now) and crawl.lease_owner != self.id:
                continue  # another live runner's: never touch it
            orphan = (crawl is None or crawl.is_final or crawl.status == S.PAUSED or row is None
                      or row.status not in LIVE_INSTANCE)
            if orphan:
                self.event(f"removing orphan instance {instance.ref[:40]} of crawl {instance.crawl_id[:8]}")
                try:
                    self.launcher.remove(instance.ref)
                except LaunchError as exc:
                    log.warning("could not remove orphan %s: %s", instance.ref[:40], exc)
                found = True
            elif not row.container_id and self.launcher.name == "docker":
                Process.objects.filter(pk=row.pk, container_id="").update(
                    container_id=instance.ref, status=ProcessStatus.RUNNING, started_at=row.started_at or now)
        return found

    # --- claiming --------------------------------------------------------------------------

    def claim_due_crawls(self, now: dt.datetime) -> bool:
        """Adopt running crawls whose lease expired, then start new ones up to the free capacity."""
        lease = self.settings.lease_seconds
        adoptable = Crawl.objects.filter(
            Q(status__in=S.RUNNING_STATES) | Q(status=S.PAUSED)
            | Q(status=S.WAITING_CAPACITY, started_at__isnull=False)
        )
        found = False
        for claim in adoptable.claim(self.id, now, lease, limit=100):
            held = self.held.get(claim.pk)
            if held:  # our own lease ran out (a long tick, a suspended host): keep what we know
                held.token, held.renewed_at = claim.token, now
            else:
                self.held[claim.pk] = Held(claim.token, renewed_at=now)
                self.event(f"crawl {claim.pk[:8]}: adopted")
            found = True
        free = self.settings.max_concurrent_crawls - self.running_count()
        while free > 0:
            claims = Crawl.objects.filter(status__in=S.NOT_STARTED).claim(
                self.id, now, lease, limit=1, order_by=("created_at",))
            if not claims:
                break
            found = True
            crawl = Crawl.objects.select_related("org").get(pk=claims[0].pk)
            if self.start_safely(crawl, claims[0].token, now):
                free -= 1
        if free <= 0:
            self.mark_waiting_for_capacity(now)
        return found

    def running_count(self) -> int:
        return sum(1 for pk in self.held if self.seen.get(pk) is None or self.seen[pk].status != S.PAUSED)

    def mark_waiting_for_capacity(self, now: dt.datetime) -> int:
        """Unclaimed due crawls that do not fit say so (guarded: only unleased, not started)."""
        reason = (f"waiting: the host runs {self.running_count()} of "
                  f"{self.settings.max_concurrent_crawls} crawls")
        due = Crawl.objects.filter(status__in=S.NOT_STARTED).due(now).exclude(waiting_reason=reason)
        # Crawls that ran before keep their state (a resumed crawl stays queued) and get the reason.
        changed = due.filter(started_at__isnull=True).update(status=S.WAITING_CAPACITY,
                                                              waiting_reason=reason, updated_at=now)
        changed += due.filter(started_at__isnull=False).update(waiting_reason=reason, updated_at=now)
        return changed

    def start_safely(self, crawl: Crawl, token: int, now: dt.datetime) -> bool:
        try:
            return self.start(crawl, token, now)
        except redis.RedisError as exc:
            log.warning("crawl %s: Redis does not answer (%s); it waits", crawl.short_id, type(exc).__name__)
            self.wait(crawl, token, S.WAITING_CAPACITY, "waiting: Redis unreachable", now, ORG_RETRY)
            return False
        except Exception as exc:
            log.exception("crawl %s: could not start", crawl.short_id)
            self.fail(crawl, token, f"could not start: {exc}", now)
            return False

    def start(self, crawl: Crawl, token: int, now: dt.datetime) -> bool:
        """Admit a claimed crawl that is not running: quotas, org limit, host; then hold it."""
        if crawl.intent in (Intent.STOP, Intent.CANCEL):
            return self.end_without_running(crawl, token, now)
        decision = quotas.start_decision(crawl, now, self.host_check)
        if decision.status in S.FINAL:
            crawl.finish(decision.status, token, now, stop_reason=decision.stop_reason,
                         error=decision.reason)
            self.event(f"crawl {crawl.short_id}: {decision.status} ({decision.reason})")
            return False
        if decision.status:
            self.wait(crawl, token, decision.status, decision.reason, now, ORG_RETRY)
            return False
        if crawl.redis_db is None:
            db = self.store.free_db(set(Crawl.objects.active().exclude(redis_db=None)
                                        .values_list("redis_db", flat=True)))
            if db is None:
                self.wait(crawl, token, S.WAITING_CAPACITY, "waiting: no free Redis database", now, ORG_RETRY)
                return False
            self.store.flush(db)
            if not Crawl.objects.filter(pk=crawl.pk, lease_token=token).update(redis_db=db):
                return False
            crawl.redis_db = db
        else:
            self.store.clear_flag(crawl.redis_db, crawl.pk, "paused")
        if not crawl.mark_starting(token, now):
            return False
        self.held[crawl.pk] = Held(token, renewed_at=now)
        self.seen[crawl.pk] = crawl
        self.event(f"crawl {crawl.short_id}: starting ({crawl.seeds[0] if crawl.seeds else ''})")
        return True

    def wait(self, crawl: Crawl, token: int, status: str, reason: str, now: dt.datetime,
             retry: float) -> None:
        if crawl.mark_waiting(status, reason, token, now):
            Crawl.objects.release(crawl.pk, token, now + dt.timedelta(seconds=retry))

    def end_without_running(self, crawl: Crawl, token: int, now: dt.datetime) -> bool:
        """A crawl asked to stop or cancel before (re)starting ends with what it has."""
        db = crawl.redis_db
        if crawl.intent == Intent.CANCEL or not crawl.files.exists():
            self.delete_files(crawl)
            status, reason = S.CANCELED, StopReason.USER
        else:
            status, reason = STOPPED_STATE[StopReason.USER], StopReason.USER
        if crawl.finish(status, token, now, stop_reason=reason):
            self.clean_up(crawl, db)
            self.event(f"crawl {crawl.short_id}: {status}")
        return False

    # --- supervision -----------------------------------------------------------------------

    def supervise_safely(self, crawl: Crawl, now: dt.datetime, processes: list[Process],
                         messages: list[CrawlMessage] = ()) -> bool:
        """supervise() inside the per-crawl error boundary."""
        held = self.held.get(crawl.pk)
        if held is None:
            return False
        try:
            return self.supervise(crawl, now, processes, messages)
        except CrawlFailed as exc:
            self.fail(crawl, held.token, str(exc), now, exc.stop_reason)
            return True
        except DatabaseError:
            log.exception("crawl %s: database error; trying again next tick", crawl.short_id)
            return False
        except Exception as exc:
            log.exception("crawl %s: supervision failed; trying again next tick", crawl.short_id)
            with contextlib.suppress(DatabaseError):
                Crawl.objects.filter(pk=crawl.pk, lease_token=held.token).update(
                    waiting_reason=f"runner error: {type(exc).__name__}: {exc}"[:300])
            return False

    def supervise(self, crawl: Crawl, now: dt.datetime, processes: list[Process] | None = None,
                  messages: list[CrawlMessage] = ()) -> bool:
        """One look at a held crawl: progress in, commands out, instances checked, maybe finish."""
        held = self.held[crawl.pk]
        if not self.renew(crawl, held, now):
            return False
        if crawl.status == S.PAUSED:
            return self.end_paused(crawl, held.token, now)
        if processes is None:
            processes = list(crawl.processes.filter(status__in=LIVE_INSTANCE))
        try:
            progress = self.store.read(crawl.redis_db, crawl.pk, failed_offset=self.failed_read(crawl, held))
        except redis.RedisError as exc:
            self.redis_down(crawl, held, now, exc)
            self.check_instances(crawl, processes, None, now)
            return False
        if held.redis_down_since:
            held.redis_down_since = None
            self.note(crawl, "Redis answers again", now=now)
            self.set_waiting_reason(crawl, held, "")
        self.record_progress(crawl, held, progress, now)
        if self.disk_reason and not crawl.intent and crawl.status in S.RUNNING_STATES:
            self.pause_for_disk(crawl, held, self.disk_reason, now)
        self.send_commands(crawl, held, progress, messages, now)
        live = self.check_instances(crawl, processes, progress, now)
        if crawl.pk not in self.held:
            return True
        if held.canceled_at and (now - held.canceled_at).total_seconds() >= self.cancel_grace:
            # A canceled crawl keeps nothing, so there is nothing to wait for.
            self.note(crawl, f"crawlers still running {self.cancel_grace:g} s after the cancel; "
                             "removing them", "warning", now)
            self.finish(crawl, Outcome(S.CANCELED, StopReason.USER), now)
            return True
        if not live:
            outcome = decide_outcome(
                [progress.statuses.get(hostname(crawl.pk, i)) for i in range(crawl.scale)],
                intent=crawl.intent, stop_reason=crawl.stop_reason, pages_done=crawl.pages_done,
                pages_found=crawl.pages_found, has_files=crawl.files.exists(),
            )
            if outcome:
                self.finish(crawl, outcome, now)
                return True
        self.follow_state(crawl, held, progress, live, now)
        return False

    def pause_for_disk(self, crawl: Crawl, held: Held, reason: str, now: dt.datetime) -> None:
        """Pause a running crawl while the disk is full; resume_after_disk() queues it again.

        The reason is kept as its waiting reason ("paused: disk 93 % full ..."), which is
        what tells it from a crawl a person paused.
        """
        reason = "paused: " + reason.removeprefix("waiting: ")
        if self.save(crawl, held, now, intent=Intent.PAUSE, waiting_reason=reason[:300]):
            held.pause_reason = reason[:300]
            self.note(crawl, f"pausing: {reason.removeprefix('paused: ')}", "warning", now)

    def renew(self, crawl: Crawl, held: Held, now: dt.datetime) -> bool:
        lease = self.settings.lease_seconds
        if (now - held.renewed_at).total_seconds() < lease / 3:
            return True
        if not Crawl.objects.renew(crawl.pk, held.token, now, lease):
            self.hands_off(crawl.pk, "renewing its lease failed")
            return False
        held.renewed_at = now
        return True

    def save(self, crawl: Crawl, held: Held, now: dt.datetime, **fields) -> bool:
        """Write only `fields`, with our token; a refusal means the lease is gone."""
        if not Crawl.objects.filter(pk=crawl.pk, lease_token=held.token).update(**fields, updated_at=now):
            self.hands_off(crawl.pk, "an update was refused")
            return False
        for name, value in fields.items():
            setattr(crawl, name, value)
        return True

    def set_waiting_reason(self, crawl: Crawl, held: Held, reason: str) -> None:
        if crawl.waiting_reason != reason:
            self.save(crawl, held, self.clock(), waiting_reason=reason)

    def record_progress(self, crawl: Crawl, held: Held, progress: Progress, now: dt.datetime) -> None:
        self.ingest(crawl, progress.pages, progress.errors, now, progress.failed_pages)
        batches = 0
        while progress.more and batches < MAX_DRAIN_BATCHES:
            pages, errors = self.store.drain(crawl.redis_db, crawl.pk)
            self.ingest(crawl, pages, errors, now)
            progress.more, batches = bool(pages or errors), batches + 1
        held.failed_read = progress.failed
        if held.files_bytes is None:
            held.files_bytes = held_files_bytes(crawl)
        files = held.files_bytes
        if crawl.config_override:
            # A failed-pages session: the crawler counts from 0, the crawl keeps its pages.
            values = {"pages_done": crawl.snapshots.filter(status=SnapshotStatus.DONE).count(),
                      "pages_failed": crawl.failed_pages().count(), "size_bytes": progress.size + files}
        else:
            values = {"pages_done": progress.done, "pages_found": max(progress.found, progress.done),
                      "pages_failed": progress.failed, "size_bytes": progress.size + files}
        changed = {k: v for k, v in values.items() if getattr(crawl, k) != v}
        if changed.get("pages_done", 0) > crawl.pages_done:
            changed["progress_at"] = now
        if changed:
            self.save(crawl, held, now, **changed)

    @staticmethod
    def failed_read(crawl: Crawl, held: Held) -> int:
        """Where to go on reading <id>:f. A failed-pages session has a Redis database of its
        own, so it starts at 0; otherwise pages_failed is the length already read."""
        if held.failed_read is None:
            held.failed_read = 0 if crawl.config_override else crawl.pages_failed
        return held.failed_read

    def settle_retried_pages(self, crawl: Crawl, held: Held, now: dt.datetime) -> None:
        """The end of a failed-pages session: a page it did not report stays failed."""
        crawl.snapshots.filter(status=SnapshotStatus.QUEUED).update(
            status=SnapshotStatus.FAILED, error="not archived by the failed-pages session")
        self.save(crawl, held, now, pages_failed=crawl.failed_pages().count(),
                  pages_done=crawl.snapshots.filter(status=SnapshotStatus.DONE).count())

    def ingest(self, crawl: Crawl, pages: list[dict], errors: list[dict], now: dt.datetime,
               failed: list[dict] = ()) -> None:
        """Pages become Snapshots (one per URL: a later report replaces an earlier one, so a
        retried page that now succeeds is done), error lines become CrawlLog lines."""
        snapshots = {page["url"]: snapshot_from(crawl, page, now, SnapshotStatus.FAILED)
                     for page in failed if page.get("url")}
        snapshots.update({page["url"]: snapshot_from(crawl, page, now) for page in pages if page.get("url")})
        if snapshots:
            Snapshot.objects.bulk_create(
                list(snapshots.values()), batch_size=500, update_conflicts=True,
                unique_fields=["crawl", "url"],
                update_fields=["status", "http_status", "title", "mime", "captured_at", "filename",
                               "error", "depth"],
            )
        if errors:
            CrawlLog.objects.bulk_create([
                CrawlLog(crawl_id=crawl.pk, created_at=now, level=str(e.get("logLevel", "error"))[:16],
                         source=str(e.get("context", "crawler"))[:32],
                         message=str(e.get("message", "")), details=e.get("details") or {})
                for e in errors
            ], batch_size=500)

    def send_commands(self, crawl: Crawl, held: Held, progress: Progress,
                      messages: list[CrawlMessage], now: dt.datetime) -> None:
        """Intents and limits become Redis commands, each sent once per lease."""
        reason = None
        if crawl.intent != Intent.CANCEL and not crawl.stop_reason:
            usage = self.usage(crawl, now)
            reason = crawl.stop_reason_due(usage)
            if reason and crawl.request_limit_stop(reason, held.token, now):
                self.note(crawl, f"stopping: {quotas.stop_message(crawl, reason, usage)}", now=now)
        if crawl.intent == Intent.STOP and not crawl.stop_reason:
            self.save(crawl, held, now, stop_reason=StopReason.USER)
        wanted = {Intent.CANCEL: "canceled", Intent.STOP: "stopping", Intent.PAUSE: "paused"}.get(crawl.intent)
        if wanted and wanted not in held.flags:
            self.store.set_flag(crawl.redis_db, crawl.pk, wanted)
            held.flags.add(wanted)
            self.note(crawl, f"asked its crawlers to {crawl.intent}", now=now)
            if wanted == "canceled":
                held.canceled_at = now
        if crawl.intent != Intent.PAUSE and crawl.status in (S.STARTING, S.WAITING_CAPACITY):
            held.flags.add("paused")  # a resumed crawl that waited: make sure it is not paused
        if "paused" in held.flags and crawl.intent != Intent.PAUSE:
            self.store.clear_flag(crawl.redis_db, crawl.pk, "paused")
            held.flags.discard("paused")
        for message in messages:
            for i in range(crawl.scale):
                self.store.client(crawl.redis_db).rpush(f"{hostname(crawl.pk, i)}:msg",
                                                        json.dumps(message.payload))
            message.mark_sent(now)
        for i, status in ((int(h.rsplit("-", 1)[1]), s) for h, s in progress.statuses.items()
                          if h.startswith(f"crawl-{crawl.pk}-") and h.rsplit("-", 1)[1].isdigit()):
            if i >= crawl.scale and f"stopone-{i}" not in held.flags and status not in FINISHED_STATUSES:
                self.store.stop_one(crawl.redis_db, crawl.pk, hostname(crawl.pk, i))
                held.flags.add(f"stopone-{i}")

    def usage(self, crawl: Crawl, now: dt.datetime) -> quotas.OrgUsageNow:
        org = crawl.org
        if org.storage_quota_bytes is None and org.exec_minutes_quota is None:
            return quotas.OrgUsageNow(bytes_stored=0)  # nothing to compare: skip the queries
        return quotas.OrgUsageNow.read(org, now)

    # --- instances -------------------------------------------------------------------------

    def check_instances(self, crawl: Crawl, processes: list[Process], progress: Progress | None,
                        now: dt.datetime) -> int:
        """Exits recorded, due (re)launches made, time counted; returns how many instances are live."""
        held = self.held[crawl.pk]
        live = 0
        engine_down = exited = False
        count_now = held.counted_at is None or (now - held.counted_at).total_seconds() >= self.count_every
        for process in processes:
            if process.started_at is None:
                live += 1  # a pending (re)launch
                continue
            ref = self.launcher.ref_of(process)
            try:
                instance = self.listed.get(ref) or self.launcher.inspect(ref)
            except EngineUnavailable:
                engine_down = True
                live += 1
                continue
            if instance is not None and instance.running:
                live += 1
                if process.status == ProcessStatus.STARTING:
                    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING)
                continue
            self.handle_exit(crawl, process, instance.exit_code if instance else None,
                             bool(instance and instance.oom), now)
            count_now = exited = True
        if count_now:
            quotas.count_crawl_time(crawl, now)
            held.counted_at = now
        self.engine_state(crawl, held, engine_down, now)
        if progress is not None and exited:
            # An instance may have written its final status after we read them.
            progress.statuses = self.store.statuses(crawl.redis_db, crawl.pk)
        if progress is not None and crawl.pk in self.held and not engine_down:
            live += self.launch_missing(crawl, progress, processes, now)
        return live

    def engine_state(self, crawl: Crawl, held: Held, down: bool, now: dt.datetime) -> None:
        if down and not held.engine_down:
            held.engine_down = True
            self.note(crawl, "the Docker engine does not answer; crawlers keep running", "warning", now)
            self.set_waiting_reason(crawl, held, "waiting: Docker engine unreachable")
        elif not down and held.engine_down:
            held.engine_down = False
            self.set_waiting_reason(crawl, held, "")

    def handle_exit(self, crawl: Crawl, process: Process, code: int | None, oom: bool,
                    now: dt.datetime) -> str:
        """Record how an instance ended, keep its WACZ, remove it; raise CrawlFailed if permanent."""
        reason = classify_exit(code, oom)
        ref = self.launcher.ref_of(process)
        tail = ""
        with contextlib.suppress(LaunchError):
            tail = self.launcher.log_tail(ref)
        kept = self.collect_wacz(crawl, process, now)
        if kept is not None:
            self.forget_archived(crawl, process, kept)
        status = ProcessStatus.LOST if code is None else ProcessStatus.EXITED
        Process.objects.filter(pk=process.pk).update(
            status=status, exit_code=code, exit_reason=reason, log_tail=tail[-4000:], ended_at=now,
            retry_at=None)
        process.status, process.exit_code, process.exit_reason, process.ended_at = status, code, reason, now
        with contextlib.suppress(EngineUnavailable):
            self.launcher.remove(ref)
        if process.instance >= crawl.scale and crawl.redis_db is not None:
            # Scaled down: it finished on `stopone`; the crawl no longer waits for it.
            with contextlib.suppress(redis.RedisError):
                self.store.forget_instance(crawl.redis_db, crawl.pk, process.hostname)
            if held := self.held.get(crawl.pk):
                held.flags.discard(f"stopone-{process.instance}")
        if code != 0:
            what = "vanished" if code is None else f"exited with code {code} ({reason})"
            self.note(crawl, f"instance {process.hostname} {what}", "warning" if code else "info",
                      now, exit_code=code, log_tail=tail[-1000:])
        if reason == ExitReason.PERMANENT:
            last = tail.strip().splitlines()[-1] if tail.strip() else ""
            kind = "refused its configuration" if code == 4 else "hit a fatal error"
            raise CrawlFailed(f"crawler instance {process.hostname} {kind} (exit {code})"
                              + (f": {last[:300]}" if last else ""))
        return reason

    def launch_missing(self, crawl: Crawl, progress: Progress, processes: list[Process],
                       now: dt.datetime) -> int:
        """Launch every instance that should run and does not: new, relaunched after an exit,
        or resumed. Returns how many are now live (launched or waiting for their backoff)."""
        live_by_instance = {p.instance for p in processes if p.status in LIVE_INSTANCE}
        launched = 0
        for i in range(crawl.scale):
            status = progress.statuses.get(hostname(crawl.pk, i))
            if status in FINISHED_STATUSES or (status == "interrupted" and crawl.intent == Intent.PAUSE):
                continue
            pending = next((p for p in processes if p.instance == i and p.started_at is None
                            and p.status in LIVE_INSTANCE), None)
            if i in live_by_instance and pending is None:
                continue
            if pending is None:
                pending = self.plan_launch(crawl, i, now)
            if pending.retry_at is None or pending.retry_at <= now:
                self.launch(crawl, pending, now)
            launched += 1
        return launched

    def plan_launch(self, crawl: Crawl, instance: int, now: dt.datetime) -> Process:
        """A Process row for the next launch of `instance`, due after its backoff."""
        history = list(Process.objects.filter(crawl=crawl, instance=instance)
                       .values_list("exit_reason", "status"))
        failures = sum(1 for reason, status in history
                       if reason in FAILED_ATTEMPT or status == ProcessStatus.LOST)
        if failures >= self.settings.max_launch_attempts:
            raise CrawlFailed(f"crawler instance {hostname(crawl.pk, instance)} failed {failures} times; "
                              "giving up (see the crawl's log)")
        delay = relaunch_delay(failures)
        if delay:
            self.note(crawl, f"relaunching instance {instance} in {delay:g} s (failure {failures})", now=now)
        return Process.objects.create(
            crawl=crawl, instance=instance, hostname=hostname(crawl.pk, instance),
            launcher=self.launcher.name, runner=self.id, status=ProcessStatus.STARTING,
            retry_at=now + dt.timedelta(seconds=delay), created_at=now,
        )

    def launch(self, crawl: Crawl, process: Process, now: dt.datetime) -> bool:
        held = self.held[crawl.pk]
        instance_dir = self.settings.crawls_dir / crawl.pk / str(process.instance)
        instance_dir.mkdir(parents=True, exist_ok=True)
        config = crawl.launch_config()
        page_limit = min(filter(None, [config.page_limit, crawl.org.max_pages_per_crawl]), default=None)
        (instance_dir / CONFIG_NAME).write_text(json.dumps(config.crawler_config(page_limit)))
        spec = LaunchSpec(
            crawl_id=crawl.pk, instance=process.instance, process_id=process.pk,
            instance_dir=instance_dir, workers=config.workers, redis=self.store.endpoint,
            db=crawl.redis_db, runner_id=self.id,
            disk_utilization=int(self.settings.disk_threshold_percent),
        )
        try:
            launched = self.launcher.launch(spec)
        except EngineUnavailable as exc:
            Process.objects.filter(pk=process.pk).update(retry_at=now + dt.timedelta(seconds=ENGINE_RETRY))
            if crawl.status != S.WAITING_CAPACITY or crawl.waiting_reason != "waiting: Docker engine unreachable":
                self.note(crawl, f"cannot launch: {exc}", "warning", now)
                if crawl.status in (S.STARTING, S.RUNNING):
                    crawl.mark_waiting(S.WAITING_CAPACITY, "waiting: Docker engine unreachable", held.token, now)
                else:
                    self.set_waiting_reason(crawl, held, "waiting: Docker engine unreachable")
            return False
        except LaunchError as exc:
            if exc.permanent:
                raise CrawlFailed(f"cannot launch its crawler: {exc}") from exc
            Process.objects.filter(pk=process.pk).update(
                status=ProcessStatus.LOST, exit_reason=ExitReason.CRASH, log_tail=str(exc)[:4000],
                started_at=now, ended_at=now, retry_at=None)
            self.note(crawl, f"launching instance {process.instance} failed: {exc}", "warning", now)
            return False
        Process.objects.filter(pk=process.pk).update(
            container_id=launched.container_id, pid=launched.pid, image=launched.image,
            args=launched.args, status=ProcessStatus.RUNNING, started_at=now, counted_until=now,
            retry_at=None, runner=self.id, launcher=self.launcher.name)
        process.started_at, process.status = now, ProcessStatus.RUNNING
        self.event(f"crawl {crawl.short_id}: launched instance {process.instance} ({self.launcher.name})")
        if crawl.status in (S.STARTING, S.WAITING_CAPACITY):
            crawl.mark_running(held.token, now)
        return True

    def follow_state(self, crawl: Crawl, held: Held, progress: Progress, live: int, now: dt.datetime) -> None:
        """running / pending_wait / generate_wacz as the crawlers report; stalls counted."""
        statuses = [progress.statuses.get(hostname(crawl.pk, i), "") for i in range(crawl.scale)]
        state = crawl_state_for(statuses) if live else None
        if state and state != crawl.status and crawl.status in (*S.RUNNING_STATES, S.WAITING_CAPACITY):
            if state == S.RUNNING:
                crawl.mark_running(held.token, now)
            elif crawl.status != S.WAITING_CAPACITY:
                crawl.mark_finishing(state, held.token, now)
        if crawl.is_stalled(now, self.settings.stall_minutes) and crawl.record_stall(held.token, now):
            if crawl.stalls_exhausted:
                raise CrawlFailed(f"no page was done for {self.settings.stall_minutes:g} minutes, "
                                  f"{crawl.stalls} times", stop_reason=StopReason.STALLED)
            self.note(crawl, f"stalled: no page done for {self.settings.stall_minutes:g} minutes; "
                             "restarting its crawlers", "warning", now)
            self.restart_instances(crawl, now)

    def restart_instances(self, crawl: Crawl, now: dt.datetime) -> None:
        """Stop every running instance (SIGTERM, so it packages what it has) and keep its WACZ;
        launch_missing() launches them again. Not a failure: no backoff, no attempt used."""
        for process in crawl.processes.filter(status=ProcessStatus.RUNNING):
            self.launcher.remove(self.launcher.ref_of(process))
            kept = self.collect_wacz(crawl, process, now)
            if kept is not None:
                self.forget_archived(crawl, process, kept)
            Process.objects.filter(pk=process.pk).update(
                status=ProcessStatus.EXITED, exit_reason=ExitReason.REMOVED, ended_at=now, retry_at=None)

    def redis_down(self, crawl: Crawl, held: Held, now: dt.datetime, exc: Exception) -> None:
        if held.redis_down_since is None:
            held.redis_down_since = now
            self.note(crawl, f"Redis does not answer ({type(exc).__name__}); waiting for it", "warning", now)
            self.set_waiting_reason(crawl, held, "waiting: Redis unreachable")
            if self.on_redis_down:
                self.on_redis_down()
        elif (now - held.redis_down_since).total_seconds() >= self.redis_grace:
            raise CrawlFailed(f"Redis was unreachable for {self.redis_grace:g} s")

    # --- files -----------------------------------------------------------------------------

    def collection_dir(self, crawl: Crawl, instance: int) -> Path:
        """Where instance `instance` of `crawl` writes its collection (mounted on /crawls)."""
        return self.settings.crawls_dir / crawl.pk / str(instance) / "collections" / crawl.pk

    def collect_wacz(self, crawl: Crawl, process: Process, now: dt.datetime) -> Path | None:
        """Move an instance's session WACZ into the archive (before any relaunch overwrites it).

        Returns the kept file once it is recorded (now or by an earlier look), else None.
        """
        source = self.collection_dir(crawl, process.instance) / f"{crawl.pk}.wacz"
        folder = self.settings.data_dir / "archives" / crawl.pk
        target = folder / f"{crawl.pk}-{process.instance}-{process.pk}.wacz"
        if source.exists():
            folder.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
        if not target.exists():
            return None
        path = str(target.relative_to(self.settings.data_dir))
        if CrawlFile.objects.filter(path=path).exists():
            return target
        size, digest = target.stat().st_size, sha256_of(target)
        with transaction.atomic():
            CrawlFile.objects.create(crawl=crawl, path=path, size=size, sha256=digest, created_at=now)
            crawl.org.add_bytes(size)
        held = self.held.get(crawl.pk)
        if held and held.files_bytes is not None:
            held.files_bytes += size
        self.event(f"crawl {crawl.short_id}: kept {path} ({size} bytes)")
        return target

    def forget_archived(self, crawl: Crawl, process: Process, wacz: Path) -> int:
        """Delete from the instance's folder what a kept WACZ holds; returns the files deleted.

        Every session's WACZ packs every WARC in archive/ (and the page lists and logs), so
        without this the next session's WACZ would repeat this one. Only called after the
        instance exited, so nothing writes there. A file is deleted only if the WACZ holds
        it whole (same size), so nothing is ever lost; the per-WARC index files go with
        their WARC (`warc-cdx/<warc>.cdx` for browsertrix-crawler, `warc-cdxj/<warc>.cdxj`
        for ours), since packaging merges every index it finds. The instance's `:size` is
        set to what is left, as those bytes are now counted in the kept file.
        """
        collection = self.collection_dir(crawl, process.instance)
        try:
            with zipfile.ZipFile(wacz) as archive:
                members = {info.filename: info.file_size for info in archive.infolist()}
        except (zipfile.BadZipFile, OSError) as exc:
            log.warning("crawl %s: cannot read %s (%s); leaving the instance's files", crawl.short_id,
                        wacz.name, exc)
            return 0
        deleted = 0
        for name, size in members.items():
            folder, _, base = name.partition("/")
            if folder not in ("archive", "pages", "logs") or not base or Path(base).name != base \
                    or base in (".", ".."):
                continue
            path = collection / folder / base
            with contextlib.suppress(FileNotFoundError):
                if not path.is_file() or path.is_symlink() or path.stat().st_size != size:
                    continue
                path.unlink()
                deleted += 1
                if folder == "archive":
                    (collection / "warc-cdx" / f"{base}.cdx").unlink(missing_ok=True)
                    (collection / "warc-cdxj" / f"{base}.cdxj").unlink(missing_ok=True)
        left = sum(path.stat().st_size for path in (collection / "archive").glob("*.warc*")
                   if path.is_file())
        if crawl.redis_db is not None:
            try:
                self.store.set_size(crawl.redis_db, crawl.pk, process.hostname, left)
            except redis.RedisError as exc:
                log.warning("crawl %s: could not reset the size of %s (%s)", crawl.short_id,
                            process.hostname, type(exc).__name__)
        return deleted

    def delete_files(self, crawl: Crawl) -> None:
        """A canceled crawl keeps nothing: its files leave the disk and the org's bytes."""
        for record in crawl.files.all():
            (self.settings.data_dir / record.path).unlink(missing_ok=True)
            with transaction.atomic():
                if CrawlFile.objects.filter(pk=record.pk).delete()[0]:
                    crawl.org.add_bytes(-record.size)

    # --- finishing -------------------------------------------------------------------------

    def finish(self, crawl: Crawl, outcome: Outcome, now: dt.datetime) -> None:
        held = self.held[crawl.pk]
        if outcome.status == S.PAUSED:
            self.remove_instances(crawl)
            quotas.count_crawl_time(crawl, now)
            self.record_size(crawl, held, now)
            reason = held.pause_reason or (crawl.waiting_reason
                                           if crawl.waiting_reason.startswith(DISK_PAUSE) else "")
            if crawl.mark_paused(held.token, now, reason):
                self.event(f"crawl {crawl.short_id}: paused" + (f" ({reason})" if reason else ""))
                self.slot_freed(crawl)
            self.held.pop(crawl.pk, None)
            return
        db = crawl.redis_db
        self.read_rest(crawl, held, now)
        self.remove_instances(crawl)
        quotas.count_crawl_time(crawl, now)
        if crawl.config_override:
            self.settle_retried_pages(crawl, held, now)
        if outcome.status == S.CANCELED:
            self.delete_files(crawl)
        elif files := held_files_bytes(crawl):
            Crawl.objects.filter(pk=crawl.pk, lease_token=held.token).update(size_bytes=files)
            crawl.size_bytes = files
        if not crawl.finish(outcome.status, held.token, now, stop_reason=outcome.stop_reason,
                            error=outcome.error):
            self.hands_off(crawl.pk, "finishing it was refused")
            return
        self.held.pop(crawl.pk, None)
        self.clean_up(crawl, db)
        self.event(f"crawl {crawl.short_id}: {outcome.status} pages={crawl.pages_done}/{crawl.pages_found}"
                   + (f" ({outcome.error})" if outcome.error else ""))

    def record_size(self, crawl: Crawl, held: Held, now: dt.datetime) -> None:
        """size_bytes once no instance runs: kept files plus what is left in progress."""
        with contextlib.suppress(redis.RedisError):
            size = held_files_bytes(crawl) + self.store.size(crawl.redis_db, crawl.pk)
            if size != crawl.size_bytes:
                self.save(crawl, held, now, size_bytes=size)

    def fail(self, crawl: Crawl, token: int, error: str, now: dt.datetime, stop_reason: str = "") -> None:
        """End a crawl as failed with `error`, whatever its instances are doing."""
        db = crawl.redis_db
        with contextlib.suppress(redis.RedisError):
            if db is not None:
                self.drain_rest(crawl, now)
        with contextlib.suppress(LaunchError):
            self.remove_instances(crawl)
        if crawl.finish(S.FAILED, token, now, stop_reason=stop_reason or crawl.stop_reason, error=error[:2000]):
            self.note(crawl, f"failed: {error}", "error", now)
            self.clean_up(crawl, db)
        self.held.pop(crawl.pk, None)

    def end_paused(self, crawl: Crawl, token: int, now: dt.datetime) -> bool:
        """A paused crawl we claimed: stopped or canceled on request, or paused too long."""
        db = crawl.redis_db
        if crawl.intent in (Intent.STOP, Intent.CANCEL):
            self.end_without_running(crawl, token, now)
        elif crawl.pause_expired(now, self.settings.pause_limit):
            if crawl.finish(S.STOPPED_PAUSE_LIMIT, token, now, stop_reason=StopReason.PAUSE_LIMIT):
                self.clean_up(crawl, db)
                self.event(f"crawl {crawl.short_id}: stopped, paused longer than allowed")
        else:
            Crawl.objects.release(crawl.pk, token, crawl.paused_at + dt.timedelta(
                seconds=self.settings.pause_limit))
        self.held.pop(crawl.pk, None)
        return True

    def read_rest(self, crawl: Crawl, held: Held, now: dt.datetime) -> None:
        """The last counters, pages, failed pages and error lines the crawlers wrote."""
        for _ in range(10_000):
            progress = self.store.read(crawl.redis_db, crawl.pk, failed_offset=self.failed_read(crawl, held))
            self.record_progress(crawl, held, progress, now)
            if not progress.more:
                return

    def drain_rest(self, crawl: Crawl, now: dt.datetime) -> None:
        for _ in range(10_000):
            pages, errors = self.store.drain(crawl.redis_db, crawl.pk)
            if not pages and not errors:
                return
            self.ingest(crawl, pages, errors, now)

    def remove_instances(self, crawl: Crawl) -> None:
        for process in crawl.processes.filter(status__in=LIVE_INSTANCE):
            if process.started_at is not None:
                self.launcher.remove(self.launcher.ref_of(process))
            Process.objects.filter(pk=process.pk).update(
                status=ProcessStatus.EXITED, exit_reason=ExitReason.REMOVED, ended_at=self.clock(),
                retry_at=None)

    def clean_up(self, crawl: Crawl, db: int | None = None) -> None:
        """After the crawl is final: its Redis database and working folder go."""
        db = crawl.redis_db if db is None else db
        if db is not None:
            try:
                self.store.flush(db)
                self.store.forget(db)
            except redis.RedisError as exc:
                log.warning("crawl %s: could not flush Redis db %s (%s); it is flushed when reused",
                            crawl.short_id, db, type(exc).__name__)
        shutil.rmtree(self.settings.crawls_dir / crawl.pk, ignore_errors=True)
        self.slot_freed(crawl)

    def slot_freed(self, crawl: Crawl) -> None:
        """A crawl of this org stopped running: its oldest waiting crawl may start now, not
        after the org retry delay (unleased ones only; the claim keeps the age order)."""
        if crawl.org.max_concurrent_crawls is not None:
            Crawl.objects.filter(org_id=crawl.org_id, status=S.WAITING_ORG_LIMIT, lease_owner="").update(
                retry_at=self.clock())

    # --- the loop --------------------------------------------------------------------------

    def run(self, mode: str = "daemon", view=None) -> None:
        """`daemon`: until signalled; `drain`: until nothing is due or active; `once`: one tick."""
        self.acquire_lock()
        try:
            with self.signals(mode), self.wake_socket():
                self.register(self.clock())
                self.start_webhooks(mode)
                self.loop(mode, view)
        finally:
            self.shutdown()
            self.release_lock()

    def loop(self, mode: str, view=None) -> None:
        pause_deadline = None
        while True:
            try:
                now = self.clock()
                found = self.tick(now)
            except DatabaseError:
                # The database is away or locked for too long: nothing can be decided now.
                log.exception("tick failed on a database error; trying again shortly")
                self.sleep(self.settings.poll_interval)
                continue
            if view:
                view.update(self)
            if mode == "once":
                return
            if self.stop_event.is_set():
                if not self.interrupt_crawls or not self.held:
                    return
                if pause_deadline is None:
                    pause_deadline = now + dt.timedelta(seconds=SHUTDOWN_PAUSE_TIMEOUT)
                    self.pause_all(now)
                elif now > pause_deadline:
                    log.warning("crawls did not pause within %g s; leaving them running",
                                SHUTDOWN_PAUSE_TIMEOUT)
                    return
            if mode == "drain" and not self.held and not self.has_due_work(now):
                return
            if not found:
                self.sleep(self.sleep_time(now))

    def pause_all(self, now: dt.datetime) -> None:
        self.event(f"pausing {len(self.held)} crawl(s) before exiting")
        for crawl in Crawl.objects.filter(pk__in=list(self.held), status__in=S.RUNNING_STATES):
            with contextlib.suppress(ArchiverError):
                crawl.pause(now)

    def has_due_work(self, now: dt.datetime) -> bool:
        soon = now + dt.timedelta(seconds=ORG_RETRY + 1)
        return Crawl.objects.filter(status__in=S.ACTIVE, retry_at__lte=soon).exclude(
            status=S.PAUSED, retry_at__gt=now).exists()

    def sleep_time(self, now: dt.datetime) -> float:
        timeout = min(ACTIVE_TICK, self.settings.poll_interval) if self.held else self.settings.poll_interval
        next_due = (Crawl.objects.filter(status__in=S.ACTIVE, retry_at__gt=now).order_by("retry_at")
                    .values_list("retry_at", flat=True).first())
        if next_due is not None:
            timeout = min(timeout, max((next_due - now).total_seconds(), 0.01))
        return timeout

    def sleep(self, timeout: float) -> None:
        """Wait for a nudge on the wake socket, a signal, or the timeout."""
        if self.stop_event.is_set() and not self.interrupt_crawls:
            return
        if self._wake is None:
            if self.stop_event.is_set():  # pausing the crawls before exit: wait, do not spin
                threading.Event().wait(timeout)
            else:
                self.stop_event.wait(timeout)
            return
        try:
            ready, _, _ = select.select([self._wake], [], [], timeout)
        except InterruptedError:
            return
        if ready:
            with contextlib.suppress(BlockingIOError):
                while self._wake.recv(64):
                    pass

    @contextlib.contextmanager
    def wake_socket(self) -> Iterator[None]:
        path = self.settings.wake_socket
        if len(str(path).encode()) >= 104:
            log.warning("wake socket path %s is too long for a Unix socket; polling every %g s",
                        path, self.settings.poll_interval)
            yield
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a stale one: we hold the runner lock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(str(path))
        sock.setblocking(False)
        self._wake = sock
        try:
            yield
        finally:
            self._wake = None
            sock.close()
            path.unlink(missing_ok=True)

    def wake(self) -> None:
        """Wake the loop from another thread (tests, signal handling)."""
        if self._wake is not None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, contextlib.suppress(OSError):
                sock.sendto(b"!", str(self.settings.wake_socket))

    @contextlib.contextmanager
    def signals(self, mode: str) -> Iterator[None]:
        """First SIGTERM/SIGINT: stop after this tick. Second: exit at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum, frame):
            if self.stop_event.is_set():
                raise SystemExit(f"second {signal.Signals(signum).name}: exiting now")
            log.info("%s: finishing this tick, then exiting%s", signal.Signals(signum).name,
                     " after pausing the crawls" if self.interrupt_crawls else
                     " (crawlers keep running)")
            self.stop_event.set()

        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def start_webhooks(self, mode: str) -> None:
        try:
            from runner import webhooks
        except ImportError:
            return
        if mode == "daemon":
            self._webhooks = webhooks.WebhookDispatcher(self.id).start()
            self.steps.append(("webhooks", lambda now: self._webhooks.wake() and False))
        else:
            self.steps.append(("webhooks", lambda now: webhooks.deliver_due_webhooks(
                f"{self.id}/webhooks"[-64:], now)))

    def shutdown(self) -> None:
        """Give our leases back (due now, so a restarted runner adopts at once); crawlers keep running."""
        if self._webhooks:
            self._webhooks.stop(timeout=10)
            self._webhooks = None
        self.launcher.close()
        self.store.close()
        now = self.clock()
        with contextlib.suppress(DatabaseError):
            for pk, held in list(self.held.items()):
                Crawl.objects.release(pk, held.token, now)
            self.held.clear()
            RunnerRecord.objects.filter(pk=self.id).update(stopped_at=now, heartbeat_at=now)


# --- helpers -------------------------------------------------------------------------------


def by_crawl(rows, crawls: dict[str, Crawl]) -> dict[str, list]:
    """The rows of these crawls, grouped by crawl id, in one query (none without crawls)."""
    grouped: dict[str, list] = defaultdict(list)
    if crawls:
        for row in rows.filter(crawl_id__in=list(crawls)):
            grouped[row.crawl_id].append(row)
    return grouped


def acquire_runner_lock(settings: Settings):
    """Be the only runner on this data dir; the lock dies with the process (kill -9 too)."""
    path = settings.run_dir / "runner.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the life of the runner
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "?"
        handle.close()
        raise RunnerBusy(f"another runner (pid {pid}) already runs on {settings.data_dir}; "
                         "stop it first, or give this one another ARCHIVER_DATA_DIR") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def held_files_bytes(crawl: Crawl) -> int:
    return sum(crawl.files.values_list("size", flat=True))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def snapshot_from(crawl: Crawl, page: dict, now: dt.datetime,
                  status: str = SnapshotStatus.DONE) -> Snapshot:
    http_status = page.get("status")
    captured = None
    if page.get("ts"):
        with contextlib.suppress(ValueError, TypeError):
            captured = dt.datetime.fromisoformat(str(page["ts"]).replace("Z", "+00:00"))
    return Snapshot(
        crawl_id=crawl.pk, url=str(page["url"]), depth=int(page.get("depth") or 0),
        seed=bool(page.get("seed")), status=status, error=str(page.get("reason") or "")[:2000],
        http_status=http_status if isinstance(http_status, int) and 0 <= http_status < 1000 else None,
        title=str(page.get("title") or "")[:2000], mime=str(page.get("mime") or "")[:200],
        captured_at=captured, filename=str(page.get("filename") or "")[:300], created_at=now,
    )

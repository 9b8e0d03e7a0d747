"""The runner: a thin loop around one-pass steps that claim, launch, supervise and finish crawls.

    runner = Runner(settings, launcher, store)
    runner.tick(now)            # heartbeat -> recover -> claim -> supervise -> periodic steps
    runner.run(mode="daemon")   # the loop: tick, then sleep on the wake socket

The steps live in runner/steps/ and share a Runtime (runner/state.py); supervision is
observe -> decide -> apply (docs/architecture.md). This module only owns the loop, its
modes, signals and the wake socket. Every path through a turn of the loop ends at the stop
check: a database that is away (the tick fails at once) never keeps a stopping daemon
spinning; leases it could not give back run out, or this data dir's next runner takes them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import redis
from django.db import DatabaseError, connection, transaction

from archiver.conf import Settings
from archiver.errors import ArchiverError, ConfigError
from crawls import admission, wake
from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, RunnerRecord, WebhookDelivery
from runner import lease_keeper, qa_queue
from runner.decide import classify_exit, crawl_state_for, decide_outcome, relaunch_delay
from runner.launchers import Launcher
from runner.outage import CONNECTION_ERRORS, Outage, describe, fresh_connection
from runner.progress import ProgressStore
from runner.state import Runtime, new_runner_id
from runner.steps import claim, periodic, recover, supervise

log = logging.getLogger(__name__)
S = CrawlStatus

ACTIVE_TICK = 1.0  # seconds between ticks while crawls run
SHUTDOWN_PAUSE_TIMEOUT = 120.0
WEBHOOK_THREADS = 4  # delivery threads; each receiver gets one at a time (runner/webhooks.py)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

__all__ = ["Runner", "RunnerBusy", "acquire_runner_lock", "classify_exit", "crawl_state_for",
           "decide_outcome", "relaunch_delay"]


class RunnerBusy(ConfigError):
    """Another runner already works on this data dir (or this SQLite database)."""


class Runner:
    """The loop and its modes; the work is in the steps (runner/steps/)."""

    def __init__(self, settings: Settings, launcher: Launcher, store: ProgressStore, *,
                 runner_id: str | None = None, clock: Callable[[], dt.datetime] = db_now,
                 host_check: Callable[[Crawl], str | None] | None = None,
                 disk_check: Callable[[], str | None] | None = None,
                 host_usage: Callable[[], admission.HostUsage] | None = None,
                 on_redis_down: Callable[[], None] | None = None, lock_file=None,
                 redis_watch=None):
        # The default data dir is relative ("data"); crawlers run in other working directories.
        settings = settings.model_copy(update={"data_dir": settings.data_dir.resolve()})
        usage = host_usage or (lambda: admission.read_host_usage(settings.data_dir))
        self.rt = Runtime(settings=settings, launcher=launcher, store=store,
                          id=runner_id or new_runner_id(), clock=clock, host_check=None,
                          disk_check=None, host_usage=usage, on_redis_down=on_redis_down)
        self.rt.host_check = host_check or (lambda crawl: claim.host_wait_reason(self.rt, crawl))
        self.rt.disk_check = disk_check or (lambda: supervise.disk_full_reason(self.rt))
        self.redis_watch = redis_watch  # runner.redis_server.RedisWatch, or None (tests)
        self.stop_event = self.rt.stop_event  # long reads (page lists) end when it is set
        self.interrupt_crawls = False
        purge = periodic.Retention()
        # Periodic steps after supervision: (name, step(now) -> found work).
        self.steps: list[tuple[str, Callable[[dt.datetime], bool]]] = [
            ("schedules", lambda now: periodic.fire_schedules(self.rt, now)),
            ("retention", lambda now: purge(self.rt, now)),
            ("disk", lambda now: periodic.resume_after_disk(self.rt, now)),
            ("redis databases", lambda now: periodic.release_redis_left_over(self.rt, now)),
            ("search index", lambda now: periodic.index_pages(self.rt, now)),
            ("dedup index", lambda now: periodic.index_payloads(self.rt, now)),
        ]
        self._reconnect_pending = False
        self._wake: socket.socket | None = None
        self._lock_file = lock_file  # from acquire_runner_lock(), if taken already
        self._workers: list = []  # (thread owner, seconds to stop): webhooks, reviews
        self._hurry = False  # a second signal: exit without waiting for anything

    # What tests, the live view and the service read.
    settings = property(lambda self: self.rt.settings)
    launcher = property(lambda self: self.rt.launcher)
    store = property(lambda self: self.rt.store)
    id = property(lambda self: self.rt.id)
    clock = property(lambda self: self.rt.clock)
    held = property(lambda self: self.rt.held)
    seen = property(lambda self: self.rt.seen)
    events = property(lambda self: self.rt.events)

    def _tunable(name):  # noqa: N805 - a property factory used in the class body
        return property(lambda self: getattr(self.rt, name),
                        lambda self, value: setattr(self.rt, name, value))

    count_every = _tunable("count_every")
    redis_grace = _tunable("redis_grace")
    corrupt_grace = _tunable("corrupt_grace")
    cancel_grace = _tunable("cancel_grace")
    on_redis_down = _tunable("on_redis_down")
    del _tunable

    # --- identity --------------------------------------------------------------------------

    def acquire_lock(self) -> None:
        if self._lock_file is None:
            self._lock_file = acquire_runner_lock(self.settings)

    def release_lock(self) -> None:
        if self._lock_file:
            self._lock_file.close()
            self._lock_file = None

    def register(self, now: dt.datetime) -> None:
        register_runner(self.id, self.settings, now)

    def heartbeat(self, now: dt.datetime) -> None:
        RunnerRecord.objects.filter(pk=self.id).update(heartbeat_at=now)

    # --- one tick --------------------------------------------------------------------------

    def tick(self, now: dt.datetime | None = None) -> bool:
        """One pass of every step; True when a step found new work."""
        now = now or self.clock()
        self.rt.tick_started = time.monotonic()
        self.rt.stopping = self.stop_event.is_set()
        self.heartbeat(now)
        self.watch_redis(now)
        found = recover.recover(self.rt, now)
        if not self.rt.stopping:
            found |= claim.claim_due_crawls(self.rt, now)
        found |= supervise.supervise_all(self.rt, now)
        for name, step in self.steps:
            try:
                found |= bool(step(now))
            except CONNECTION_ERRORS:
                raise  # the database is away: the loop waits for it (runner/outage.py)
            except DatabaseError:
                log.warning("step %s: database error; trying again next tick", name)
            except Exception:  # noqa: BLE001 - a periodic step never stops the loop
                log.exception("step %s failed; going on", name)
        return found

    def watch_redis(self, now: dt.datetime) -> None:
        """Keep the Redis server alive, and follow it when it restarted or moved: the store
        reconnects, and every held crawl's crawler identity is granted again."""
        if self.redis_watch is None:
            return
        endpoint = self.redis_watch.check(now)
        if endpoint is None and not self._reconnect_pending:
            return
        try:
            self.store.reconnect(endpoint or self.redis_watch.endpoint)
        except redis.RedisError as exc:
            self._reconnect_pending = True
            log.warning("could not reconnect to Redis yet (%s); trying again", type(exc).__name__)
            return
        self._reconnect_pending = False
        for held in self.held.values():
            held.granted = False

    def keep_what_is_left_here(self, now: dt.datetime) -> None:
        """Start-up: instances no crawl of ours owns are removed first, then what this data dir
        still holds for crawls that left it is kept and recorded (runner/steps/recover.py)."""
        try:
            recover.recover(self.rt, now)
            recover.keep_what_is_left_here(self.rt, now)
        except (OSError, DatabaseError) as exc:
            log.warning("could not look at what this data dir holds (%s); going on", exc)

    def recover(self, now: dt.datetime) -> bool:
        return recover.recover(self.rt, now)

    # --- the loop --------------------------------------------------------------------------

    def run(self, mode: str = "daemon", view=None) -> None:
        """`daemon`: until signalled; `drain`: until nothing is due or active; `once`: one tick."""
        self.acquire_lock()
        try:
            with self.signals(), self.wake_socket():
                self.register(self.clock())
                self.keep_what_is_left_here(self.clock())
                self.start_webhooks(mode)
                self.start_reviews(mode)
                if changes := periodic.attach_change_alerts(self.rt, mode, self.steps):
                    self._workers.append((changes, 10))  # off the tick: a comparison never holds it
                self._workers += lease_keeper.attach(self.rt, mode, self.steps)  # renewal off the tick
                self.loop(mode, view)
        finally:
            self.shutdown()
            self.release_lock()

    def loop(self, mode: str, view=None) -> None:
        pause_deadline = None
        outage = Outage("runner", first_wait=self.settings.poll_interval)
        while True:
            try:
                fresh_connection()
                now = self.clock()
                found = self.tick(now)
                outage.recovered()
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
                if mode == "drain" and not self.held and not has_due_work(now):
                    return
                pause = 0.0 if found else self.sleep_time(now)
            except CONNECTION_ERRORS as exc:
                pause = outage.failed(exc)
                if self.stop_event.is_set():
                    log.warning("stopping while the database is unavailable (%s): the crawls "
                                "keep running, and a runner adopts them once it is back",
                                describe(exc))
                    return
            except DatabaseError:
                log.exception("tick failed on a database error; trying again shortly")
                if self.stop_event.is_set():
                    return
                pause = self.settings.poll_interval
            if pause:
                self.sleep(pause)

    def pause_all(self, now: dt.datetime) -> None:
        self.rt.event(f"pausing {len(self.held)} crawl(s) before exiting")
        for crawl in Crawl.objects.filter(pk__in=list(self.held), status__in=S.RUNNING_STATES):
            with contextlib.suppress(ArchiverError):
                crawl.pause(now)

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
        with open_wake_socket(self.settings.wake_socket, self.settings.poll_interval) as sock:
            self._wake = sock
            try:
                yield
            finally:
                self._wake = None

    def wake(self) -> None:
        """Wake the loop from another thread (tests, signal handling)."""
        if self._wake is not None:
            wake.nudge(self.settings.wake_socket)

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """First SIGTERM/SIGINT/SIGHUP: stop after this tick, at once (the loop is woken).
        Second: exit at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum, frame):
            if self.stop_event.is_set():
                self._hurry = True  # shutdown() does not wait for the worker threads
                raise SystemExit(f"second {signal.Signals(signum).name}: exiting now")
            log.info("%s: finishing this tick, then exiting%s", signal.Signals(signum).name,
                     " after pausing the crawls" if self.interrupt_crawls else
                     " (crawlers keep running)")
            self.stop_event.set()
            self.wake()

        previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
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
            dispatcher = webhooks.WebhookDispatcher(self.id, threads=WEBHOOK_THREADS).start()
            self._workers.append((dispatcher, 10))
            self.steps.append(("webhooks", lambda now: dispatcher.wake() and False))
        else:
            self.steps.append(("webhooks", lambda now: webhooks.deliver_due_webhooks(
                webhooks.lease_owner(self.id, 0), now)))

    def start_reviews(self, mode: str) -> None:  # in a thread, never the tick (qa_queue.attach)
        if reviews := qa_queue.attach(self.settings, self.id, mode, self.steps, self.stop_event, self.clock):
            self._workers.append((reviews, 30))  # a review in flight stops between pages, due again at once

    def shutdown(self) -> None:
        """Give our leases back (due now, so a restarted runner adopts at once); crawlers keep running."""
        for worker, _grace in self._workers:  # all at once: their passes in flight end side by side
            worker.ask_to_stop()  # (each held as long by a database away or locked)
        while self._workers:  # the last started first: reviews, then webhooks
            worker, grace = self._workers.pop()
            worker.stop(timeout=0 if self._hurry else grace)
        self.launcher.close()
        self.store.close()
        try:
            fresh_connection()
            now = self.clock()
            for pk, held in list(self.held.items()):
                Crawl.objects.release(pk, held.token, now)
            self.held.clear()
            RunnerRecord.objects.filter(pk=self.id).update(stopped_at=now, heartbeat_at=now)
        except DatabaseError as exc:
            log.warning("could not give back the leases of %d crawl(s): %s", len(self.held),
                        describe(exc))


@contextlib.contextmanager
def open_wake_socket(path, poll_interval: float) -> Iterator[socket.socket | None]:
    """The loop's wake socket (None when its path is too long: the loop polls instead)."""
    if len(str(path).encode()) >= 104:
        log.warning("wake socket path %s is too long for a Unix socket; polling every %g s",
                    path, poll_interval)
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a stale one: we hold the runner lock
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()
        path.unlink(missing_ok=True)


def has_due_work(now: dt.datetime) -> bool:
    soon = now + dt.timedelta(seconds=claim.ORG_RETRY + 1)
    crawls = Crawl.objects.filter(status__in=S.ACTIVE, retry_at__lte=soon).exclude(status=S.PAUSED, retry_at__gt=now)
    return qa_queue.has_due(now) or crawls.exists()


def register_runner(runner_id: str, settings: Settings, now: dt.datetime) -> None:
    """Record this runner; runners of this data dir on this host before us are dead
    (we hold the lock they held), so their crawls become due at once."""
    host, data_dir = os.uname().nodename, str(settings.data_dir)
    refuse_shared_sqlite(host, data_dir, now, settings.lease_seconds)
    # Our record first, and all in one transaction: other runners adopt a crawl whose home
    # has no live record, so this home must never be without one, even for a moment (it
    # was, between the two statements, and a runner ticking then took our crawls away
    # while our crawlers still ran: the two-runner chaos trial lost their pages).
    with transaction.atomic():
        RunnerRecord.objects.create(id=runner_id, hostname=host, pid=os.getpid(),
                                    data_dir=data_dir, started_at=now, heartbeat_at=now)
        dead = list(RunnerRecord.objects.filter(hostname=host, data_dir=data_dir,
                                                stopped_at__isnull=True)
                    .exclude(pk=runner_id).values_list("pk", flat=True))
        RunnerRecord.objects.filter(pk__in=dead).update(stopped_at=now)
        taken = Crawl.objects.take_over_from(dead, now)
        # A delivery one of them was sending when it died is due now too, not when its
        # 2-minute lease ends (its event reaches the receiver again, with the same id).
        from runner import webhooks

        WebhookDelivery.objects.take_over_from(
            [webhooks.lease_owner(d, thread) for d in dead for thread in range(WEBHOOK_THREADS)], now)
    if taken:
        log.info("taking over %d crawl(s) from a runner that died (%s)", taken, ", ".join(dead))


def refuse_shared_sqlite(host: str, data_dir: str, now: dt.datetime, lease_seconds: float) -> None:
    """SQLite serves one runner: a live runner of another data dir on this database is refused
    (two data dirs pointed at one SQLite file would adopt each other's crawls)."""
    if connection.vendor != "sqlite":
        return
    since = now - dt.timedelta(seconds=claim.DEAD_AFTER_LEASES * lease_seconds)
    other = (RunnerRecord.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=since)
             .exclude(hostname=host, data_dir=data_dir).first())
    if other is not None:
        raise RunnerBusy(f"runner {other.pk} (data dir {other.data_dir}) already uses this SQLite "
                         "database; SQLite serves one runner: give each its own data dir and "
                         "database, or use PostgreSQL (ARCHIVER_DATABASE_URL) for several")


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

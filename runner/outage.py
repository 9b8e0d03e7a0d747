"""The database comes and goes: how the runner's long-lived loops live through it (and,
through the same `Absence`, how the tick says the Docker engine is away: steps/recover.py).

Every loop (the tick, and each thread beside it: webhook delivery, quality reviews, a
review's lease renewal) calls `fresh_connection()` before each pass, and hands what a pass
raised to its `Outage`:

    outage = Outage("webhook delivery")
    while not stopping:
        fresh_connection()
        try:
            work()
        except CONNECTION_ERRORS as exc:
            wait(outage.failed(exc))   # back-off; logged once, then once a minute
            continue
        outage.recovered()            # logged once, if there was an outage

Django drops a broken connection only in close_old_connections(), which runs around web
requests; a loop that never calls it keeps the dead connection and fails every query for
good ("the connection is closed"), as the daemon did after `pg_ctl restart` (issue 37).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.db.backends.signals import connection_created

log = logging.getLogger(__name__)

# What a database away, restarting or locked raises; other DatabaseErrors are bugs or bad data.
CONNECTION_ERRORS = (OperationalError, InterfaceError)
REMIND_EVERY = 60.0  # seconds between "still unavailable" lines
BACKOFF_CAP = 2.0  # the longest wait between tries: the database is used soon after it is back
RUNNER_BUSY_MS = 3000  # SQLite: how long one of the runner's queries waits for another writer


def fresh_connection() -> None:
    """Drop this thread's connection if it broke or aged out, so the next query opens a new
    one; with CONN_HEALTH_CHECKS, the next query first checks that the connection answers.
    Inside a transaction (a test's) the connection is left alone."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


def short_busy_waits() -> None:
    """In the runner's process, a query waits RUNNER_BUSY_MS for another writer's SQLite
    lock, not the 30 s the admin and the CLI wait: SQLite sleeps inside the query, where no
    signal handler runs, so a lock held for the whole busy timeout held SIGTERM as long (and
    each thread's shutdown as long again). Past it the query raises "database is locked",
    which the loops wait out as any outage: said once, the stop check reached."""
    connection_created.connect(_short_busy_wait, dispatch_uid="runner.outage.short_busy_wait")
    if connection.connection is not None:  # opened before (system checks, set-up)
        _short_busy_wait(None, connection)


def _short_busy_wait(sender, connection, **kwargs) -> None:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {RUNNER_BUSY_MS}")


def drop_connection() -> None:
    if not connection.in_atomic_block:
        with contextlib.suppress(DatabaseError):
            connection.close()


def describe(exc: BaseException) -> str:
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}"[:200]


class Absence:
    """A part the runner needs (the database, the Docker engine) away, as one loop or one
    group of threads sees it: back-off between tries, and the lines saying so, once when it
    starts (with what failed), at most once a minute while it lasts, once when it ends.
    Thread-safe: threads of one group share one."""

    def __init__(self, what: str, part: str, first_wait: float = 0.5, cap: float = BACKOFF_CAP,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.part = what, part
        self.first_wait, self.cap, self.clock = first_wait, cap, clock
        self.since: float | None = None
        self.said_at = 0.0
        self.failures = 0
        self._lock = threading.Lock()

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> float:
        """Record a failed pass; the seconds to wait before the next try."""
        with self._lock:
            now = self.clock()
            if self.since is None:
                self.since, self.said_at, self.failures = now, now, 0
                log.warning("%s: %s is unavailable (%s); waiting for it",
                            self.what, self.part, describe(exc))
            elif now - self.said_at >= REMIND_EVERY:
                self.said_at = now
                log.warning("%s: %s is still unavailable after %.0f s (%s)",
                            self.what, self.part, now - self.since, describe(exc))
            self.failures += 1
            return min(self.first_wait * 2 ** (self.failures - 1), self.cap)

    def recovered(self) -> None:
        if self.since is None:
            return
        with self._lock:
            if self.since is None:
                return
            log.info("%s: %s is back after %.1f s", self.what, self.part, self.clock() - self.since)
            self.since = None


class Outage(Absence):
    """The database away: this thread's connection is dropped at every failure, so that the
    next try opens a new one."""

    def __init__(self, what: str, first_wait: float = 0.5, cap: float = BACKOFF_CAP,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(what, "the database", first_wait, cap, clock)

    def failed(self, exc: BaseException) -> float:
        drop_connection()
        return super().failed(exc)

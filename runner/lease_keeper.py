"""Lease renewal off the tick: a thread beside the loop renews every lease the runner holds.

A tick does slow work (packaging, ingesting page lists, keeping archives); when it renewed
the leases itself, a 40 s tick let a 30 s lease lapse and a second runner could take the
crawl over while this one still worked on it (issue 40). The keeper renews them all every
sixth of a lease in ONE statement guarded by each crawl's fencing token
(`LeaseQuerySet.renew_all`), and beats the runner's heartbeat, on its own database
connection. It only extends what the loop holds: a crawl the loop released, finished or
lost is not renewed (another owner, token or no retry_at), and the loop alone lets go of
crawls (runner/steps/supervise.py notices a lost lease at its next tick).

A loop stuck in one tick for WEDGED_AFTER is taken for wedged: the keeper stops renewing,
so its crawls' leases lapse and another runner adopts them, as when the runner dies.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from crawls.models import Crawl, RunnerRecord
from runner.polling import PollingThreads
from runner.state import Runtime
from runner.tick_stats import TickStats

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 6
WEDGED_AFTER = 900.0  # seconds in one tick; longer than the longest poll interval (300 s)


class LeaseKeeper(PollingThreads):
    what = "lease renewal"

    def __init__(self, rt: Runtime, stats: TickStats):
        super().__init__([("lease-keeper", None)], rt.settings.lease_seconds / RENEWALS_PER_LEASE)
        self.rt, self.stats = rt, stats
        self.stats_file = rt.settings.run_dir / "stats.json"
        self._wedged = False

    def pass_once(self, lane) -> bool:
        if self.wedged():
            return False
        now = self.rt.clock()
        renew_held(self.rt, now, self.stats)
        RunnerRecord.objects.filter(pk=self.rt.id).update(heartbeat_at=now, tick_stats=self.stats.exported())
        self.stats.write(self.stats_file)
        return False

    def wedged(self) -> bool:
        stuck = self.rt.tick_started and time.monotonic() - self.rt.tick_started > WEDGED_AFTER
        if stuck and not self._wedged:
            log.error("the runner's loop has been in one tick for over %g s: no longer renewing "
                      "its leases, so another runner can adopt its crawls", WEDGED_AFTER)
        elif self._wedged and not stuck:
            log.info("the runner's loop moves again: renewing its leases")
        self._wedged = bool(stuck)
        return self._wedged

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        try:
            self.stats.write(self.stats_file)
        except OSError as exc:
            log.warning("could not write %s (%s)", self.stats_file, exc)


def attach(rt: Runtime, mode: str, steps: list) -> list[tuple[LeaseKeeper, float]]:
    """The daemon's keeper, started, with a last step that times each tick (TickStats);
    returned as (worker, seconds to stop) for the daemon to stop. Other modes run none: a
    drain or a single tick is not left to run beside a second runner."""
    if mode != "daemon":
        return []
    keeper = LeaseKeeper(rt, TickStats()).start()
    steps.append(("tick stats", lambda now: keeper.stats.tick(time.monotonic() - rt.tick_started)))
    return [(keeper, 10)]


def renew_held(rt: Runtime, now: dt.datetime, stats: TickStats) -> int:
    """Renew every lease `rt` holds, in one statement; how many were renewed."""
    held = dict(rt.held)  # a copy made in one step: the loop adds and removes crawls meanwhile
    tokens = {pk: entry.token for pk, entry in held.items()}
    lease = dt.timedelta(seconds=rt.settings.lease_seconds)
    renewed = Crawl.objects.renew_all(rt.id, tokens, now, lease.total_seconds())
    for pk in renewed:
        entry = held[pk]
        stats.renewed((now - (entry.renewed_at + lease)).total_seconds())
        entry.renewed_at = max(entry.renewed_at, now)
    if len(renewed) < len(tokens):
        stats.skipped(len(tokens) - len(renewed))  # released or finished by the loop meanwhile, or lost
    return len(renewed)

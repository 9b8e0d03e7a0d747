"""Supervision of every held crawl: observe, decide, apply, inside a per-crawl error boundary.

A crawl whose supervision raises something unexpected backs off (2, 4, 8 ... s) and fails
after MAX_ERRORS in a row, with the error; a database error only skips it this tick.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections import defaultdict

import redis
from django.db import DatabaseError

from archiver.errors import CrawlFailed
from crawls import admission
from crawls.models import Crawl, CrawlMessage, CrawlStatus, Process
from runner import decide, ending, handover
from runner.apply import carry_out
from runner.decide import HandleExit, Policy
from runner.observe import observe, retake
from runner.outage import CONNECTION_ERRORS
from runner.state import Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus
MAX_ERRORS = 5  # unexpected errors in a row before the crawl fails with the last one
ERROR_BACKOFF_CAP = 60.0


def supervise_all(rt: Runtime, now: dt.datetime) -> bool:
    crawls = held_crawls(rt)
    rt.disk_reason = check_disk(rt) if crawls else None
    messages = by_crawl(CrawlMessage.objects.filter(sent_at__isnull=True), crawls)
    processes = by_crawl(Process.objects.live(), crawls)
    found = False
    # Crawls that wait for their first launch go first: a new crawl starts within the tick.
    for crawl in sorted(crawls.values(), key=lambda c: c.status != S.STARTING):
        found |= supervise_safely(rt, crawl, now, processes.get(crawl.pk, []), messages.get(crawl.pk, []))
    return found


def held_crawls(rt: Runtime) -> dict[str, Crawl]:
    """Our crawls as they are now; those whose lease moved are let go."""
    if not rt.held:
        rt.seen = {}
        return {}
    crawls = Crawl.objects.filter(pk__in=list(rt.held)).select_related("org").in_bulk()
    for pk in list(rt.held):
        crawl = crawls.get(pk)
        if crawl is None or crawl.lease_token != rt.held[pk].token or crawl.lease_owner != rt.id:
            rt.hands_off(pk, "its lease was taken over" if crawl else "it was deleted")
            crawls.pop(pk, None)
    rt.seen = crawls
    return crawls


def check_disk(rt: Runtime) -> str | None:
    """disk_check(), or None (and a warning once) when the disk cannot be read: not a reason
    to pause crawls, nor to stop the loop."""
    try:
        reason = rt.disk_check()
    except OSError as exc:
        if rt.episodes.begin("disk-read"):
            log.warning("cannot read the disk use of %s: %s", rt.settings.data_dir, exc)
        return None
    rt.episodes.end("disk-read")
    return reason


def disk_full_reason(rt: Runtime) -> str | None:
    """Why running crawls must pause for disk space now, or None (memory is not checked)."""
    usage = rt.host_usage()
    return admission.wait_reason(admission.HostUsage(usage.disk_used, usage.disk_free),
                                 rt.settings.disk_threshold_percent, 0)


def supervise_safely(rt: Runtime, crawl: Crawl, now: dt.datetime, processes: list[Process],
                     messages: list[CrawlMessage] = ()) -> bool:
    """supervise() inside the per-crawl error boundary."""
    held = rt.held.get(crawl.pk)
    if held is None:
        return False
    try:
        if not renew(rt, crawl, now) or (held.backoff_until and now < held.backoff_until):
            return False
        found = supervise(rt, crawl, now, processes, messages)
    except CrawlFailed as exc:
        ending.fail(rt, crawl, held.token, str(exc), now, exc.stop_reason, exc.detail)
        return True
    except CONNECTION_ERRORS:
        raise  # the database is away: the loop waits for it, no traceback per crawl
    except DatabaseError:
        log.exception("crawl %s: database error; trying again next tick", crawl.short_id)
        return False
    except Exception as exc:  # noqa: BLE001 - the per-crawl boundary: one crawl never stops the rest
        return unexpected(rt, crawl, exc, now)
    held.errors, held.backoff_until = 0, None
    return found


def unexpected(rt: Runtime, crawl: Crawl, exc: Exception, now: dt.datetime) -> bool:
    """Back off exponentially; after MAX_ERRORS in a row, fail the crawl with the error."""
    held = rt.held[crawl.pk]
    held.errors += 1
    what = f"{type(exc).__name__}: {exc}"[:300]
    if held.errors >= MAX_ERRORS:
        log.error("crawl %s: supervision failed %d times in a row; failing it (%s)",
                  crawl.short_id, held.errors, what)
        ending.fail(rt, crawl, held.token, f"the runner could not supervise it ({what})", now)
        return True
    delay = min(2.0 ** held.errors, ERROR_BACKOFF_CAP)
    held.backoff_until = now + dt.timedelta(seconds=delay)
    if held.errors == 1:
        log.exception("crawl %s: supervision failed; trying again in %g s", crawl.short_id, delay)
    else:
        log.warning("crawl %s: supervision failed again (%s); trying again in %g s",
                    crawl.short_id, what, delay)
    try:
        rt.set_waiting_reason(crawl, f"runner error: {what}", now)
    except DatabaseError:
        log.warning("crawl %s: could not record the error", crawl.short_id)
    return False


def renew(rt: Runtime, crawl: Crawl, now: dt.datetime) -> bool:
    """Renew our lease every third of it. A tick that has run long (slow engine calls)
    renews from the clock as it is now, not as it was when the tick began."""
    held = rt.held[crawl.pk]
    lease = rt.settings.lease_seconds
    if time.monotonic() - rt.tick_started > lease / 6:
        now = max(now, rt.clock())
    if (now - held.renewed_at).total_seconds() < lease / 3:
        return True
    if not Crawl.objects.renew(crawl.pk, held.token, now, lease):
        rt.hands_off(crawl.pk, "renewing its lease failed")
        return False
    held.renewed_at = now
    return True


def policy(rt: Runtime) -> Policy:
    return Policy(redis_grace=rt.redis_grace, corrupt_grace=rt.corrupt_grace,
                  cancel_grace=rt.cancel_grace, count_every=rt.count_every,
                  stall_minutes=rt.settings.stall_minutes)


def supervise(rt: Runtime, crawl: Crawl, now: dt.datetime, processes: list[Process] | None = None,
              messages: list[CrawlMessage] = ()) -> bool:
    """One look at a held crawl: progress in, commands out, instances checked, maybe finish."""
    held = rt.held[crawl.pk]
    if held.handover_until is not None and handover.pending(rt, crawl, held, now):
        return False
    if crawl.status == S.PAUSED:
        return ending.end_paused(rt, crawl, held.token, now)
    if processes is None:
        processes = list(crawl.processes.live())
    grant(rt, crawl)
    rules = policy(rt)
    obs = observe(rt, crawl, held, now, list(processes), messages)
    first = decide.first_round(obs, held, rules)
    for action in first:
        carry_out(rt, obs, held, action)
    if crawl.pk not in rt.held:
        return True
    obs = retake(rt, obs, held, exited=any(isinstance(a, HandleExit) for a in first))
    for action in decide.second_round(obs, held, rules):
        carry_out(rt, obs, held, action)
    return crawl.pk not in rt.held


def grant(rt: Runtime, crawl: Crawl) -> None:
    """Make sure the crawl's crawler identity exists on the Redis server (once per lease,
    and again after Redis restarted, which loses it). Redis being away is observed next."""
    held = rt.held[crawl.pk]
    if held.granted or crawl.redis_db is None:
        return
    with contextlib.suppress(redis.RedisError):
        rt.store.grant(crawl.redis_db, crawl.pk)
        held.granted = True


def by_crawl(rows, crawls: dict[str, Crawl]) -> dict[str, list]:
    """The rows of these crawls, grouped by crawl id, in one query (none without crawls)."""
    grouped: dict[str, list] = defaultdict(list)
    if crawls:
        for row in rows.filter(crawl_id__in=list(crawls)):
            grouped[row.crawl_id].append(row)
    return grouped

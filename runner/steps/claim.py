"""Claiming: adopt crawls whose lease expired (where we may), start new ones up to capacity.

A crawl's instances and files live with the runner that launched them (its `home_dir`).
Another runner adopts it only when that home's runner is known dead, and then relaunches
its instances from the crawl's Redis state (docs/architecture.md, "Resources are owned
through the lease").
"""

from __future__ import annotations

import datetime as dt
import logging
import os

import redis
from django.db.models import Q

from crawls import admission, quotas
from crawls.models import Crawl, CrawlStatus, ExitReason, Intent, RunnerRecord
from runner import ending, handover
from runner.observe import files_bytes
from runner.outage import CONNECTION_ERRORS
from runner.state import Held, Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus
ORG_RETRY = 5.0  # a crawl waiting for its org (or for Redis) is looked at again after this
DEAD_AFTER_LEASES = 4  # a runner silent this many leases is dead: its crawls may be adopted
REDIS_WAIT = "waiting: Redis unreachable"


def home_of(rt: Runtime) -> str:
    """Where this runner keeps instances and files: host and data dir."""
    return f"{os.uname().nodename}:{rt.settings.data_dir}"


def live_homes(rt: Runtime, now: dt.datetime) -> set[str]:
    """Homes of other runners that are alive (heartbeat within DEAD_AFTER_LEASES leases)."""
    since = now - dt.timedelta(seconds=DEAD_AFTER_LEASES * rt.settings.lease_seconds)
    rows = RunnerRecord.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=since).exclude(pk=rt.id)
    return {f"{host}:{data_dir}" for host, data_dir in rows.values_list("hostname", "data_dir")}


def claim_due_crawls(rt: Runtime, now: dt.datetime) -> bool:
    """Adopt running crawls whose lease expired, then start new ones up to the free capacity."""
    found = adopt_expired(rt, now)
    free = rt.settings.max_concurrent_crawls - running_count(rt)
    while free > 0:
        claims = Crawl.objects.not_started().claim(rt.id, now, rt.settings.lease_seconds, limit=1,
                                                  order_by=("created_at",))
        if not claims:
            break
        found = True
        crawl = Crawl.objects.select_related("org").get(pk=claims[0].pk)
        if start_safely(rt, crawl, claims[0].token, now):
            free -= 1
    if free <= 0:
        mark_waiting_for_capacity(rt, now)
    return found


def adopt_expired(rt: Runtime, now: dt.datetime) -> bool:
    home = home_of(rt)
    others = live_homes(rt, now) - {home}
    adoptable = Crawl.objects.adoptable()
    if others:
        adoptable = adoptable.filter(~Q(home_dir__in=others))
    found = False
    for claim in adoptable.claim(rt.id, now, rt.settings.lease_seconds, limit=100):
        held = rt.held.get(claim.pk)
        if held:  # our own lease ran out (a long tick, a suspended host): keep what we know
            held.token, held.renewed_at = claim.token, now
        else:
            rt.held[claim.pk] = Held(claim.token, renewed_at=now)
            take_home(rt, claim.pk, claim.token, home, now)
        found = True
    return found


def take_home(rt: Runtime, pk: str, token: int, home: str, now: dt.datetime) -> None:
    """An adopted crawl is ours from now on. If its instances lived elsewhere (a runner known
    dead), they are lost with that runner, which is not a failure of the crawl: once they
    are handed over (runner/handover.py), new ones are launched here from its Redis state."""
    crawl = Crawl.objects.get(pk=pk)
    foreign = bool(crawl.home_dir) and crawl.home_dir != home
    if foreign:
        for process in crawl.processes.live():
            process.mark_lost(ExitReason.ORPHANED, "its runner died", now)
        handover.begin(rt.held[pk], now, rt.settings.lease_seconds, DEAD_AFTER_LEASES)
        rt.note(crawl, f"adopted from {crawl.home_dir}, whose runner is gone; relaunching its "
                       "crawlers here once the old ones stopped", "warning", now)
    else:
        rt.event(f"crawl {crawl.short_id}: adopted")
    crawl.set_home(rt.id, home, token)


def running_count(rt: Runtime) -> int:
    return sum(1 for pk in rt.held if rt.seen.get(pk) is None or rt.seen[pk].status != S.PAUSED)


def mark_waiting_for_capacity(rt: Runtime, now: dt.datetime) -> int:
    """Unclaimed due crawls that do not fit say so (guarded: only unleased, not started)."""
    reason = (f"waiting: the host runs {running_count(rt)} of "
              f"{rt.settings.max_concurrent_crawls} crawls")
    return Crawl.objects.wait_for_capacity(reason, now)


def start_safely(rt: Runtime, crawl: Crawl, token: int, now: dt.datetime) -> bool:
    try:
        return start(rt, crawl, token, now)
    except redis.RedisError as exc:
        if rt.episodes.begin("redis-start"):
            log.warning("Redis does not answer (%s); new crawls wait for it", type(exc).__name__)
            if rt.on_redis_down:
                rt.on_redis_down()
        wait(crawl, token, S.WAITING_CAPACITY, REDIS_WAIT, now, ORG_RETRY)
        return False
    except CONNECTION_ERRORS:
        raise  # the database is away, not the crawl's fault: the loop waits for it
    except Exception as exc:
        log.exception("crawl %s: could not start", crawl.short_id)
        ending.fail(rt, crawl, token, f"could not start: {exc}", now)
        return False


def start(rt: Runtime, crawl: Crawl, token: int, now: dt.datetime) -> bool:
    """Admit a claimed crawl that is not running: quotas, org limit, host; then hold it."""
    if crawl.intent in (Intent.STOP, Intent.CANCEL):
        rt.held[crawl.pk] = Held(token, renewed_at=now)
        ending.end_without_running(rt, crawl, token, now)
        rt.held.pop(crawl.pk, None)
        return False
    decision = quotas.start_decision(crawl, now, rt.host_check)
    if decision.status in S.FINAL:
        crawl.finish(decision.status, token, now, stop_reason=decision.stop_reason, error=decision.reason)
        rt.event(f"crawl {crawl.short_id}: {decision.status} ({decision.reason})")
        return False
    if decision.status:
        wait(crawl, token, decision.status, decision.reason, now, ORG_RETRY)
        return False
    if crawl.redis_db is None and allocate_redis_db(rt, crawl, token) is None:
        wait(crawl, token, S.WAITING_CAPACITY, "waiting: no free Redis database", now, ORG_RETRY)
        return False
    rt.store.clear_flag(crawl.redis_db, crawl.pk, "paused")
    if rt.episodes.end("redis-start"):
        log.info("Redis answers again")
    crawl.set_home(rt.id, home_of(rt), token)
    if not crawl.mark_starting(token, now):
        return False
    rt.held[crawl.pk] = Held(token, renewed_at=now)
    rt.seen[crawl.pk] = crawl
    rt.event(f"crawl {crawl.short_id}: starting ({crawl.seeds[0] if crawl.seeds else ''})")
    return True


def allocate_redis_db(rt: Runtime, crawl: Crawl, token: int) -> int | None:
    """Win a Redis database for the crawl (the unique index decides between runners), then
    flush it: only the winner flushes, so no crawl's state is ever flushed by another's."""
    rt.store.client(0).ping()  # Redis must answer before anything is won
    used = set(Crawl.objects.holding_redis().values_list("redis_db", flat=True))
    for db in range(1, rt.store.endpoint.databases):
        if db in used:
            continue
        if crawl.take_redis_db(db, token):
            rt.store.flush(db)
            return db
        if not Crawl.objects.filter(pk=crawl.pk, lease_token=token).exists():
            return None  # the lease moved: not ours to allocate for
    return None


def wait(crawl: Crawl, token: int, status: str, reason: str, now: dt.datetime, retry: float) -> None:
    if crawl.mark_waiting(status, reason, token, now):
        Crawl.objects.release(crawl.pk, token, now + dt.timedelta(seconds=retry))


def host_wait_reason(rt: Runtime, crawl: Crawl) -> str | None:
    """Why this host has no room to start `crawl` now (disk, memory), or None. A crawl that
    ran before needs room to package what it has."""
    memory = admission.memory_needed(crawl.launch_config(), rt.settings.browser_crawler())
    unpacked = max(crawl.size_bytes - files_bytes(crawl), 0) if crawl.started_at else 0
    reserve = admission.packaging_room(unpacked) if unpacked else 0
    return admission.wait_reason(rt.host_usage(), rt.settings.disk_threshold_percent, memory, reserve)

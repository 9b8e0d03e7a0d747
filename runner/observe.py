"""What the runner knows about one held crawl this tick, read without writing anything.

`observe()` reads the crawl's live Process rows, its instances (from this tick's listing, or
the engine), its progress from Redis in one pipeline, and the org usage its limits need;
decide.py turns the Observation into actions. A Redis fault is part of the observation
(`fault`), not an exception: deciding what it means is decide.py's job.

An Observation is never changed once taken (it is frozen): supervision's second round
decides on one taken again (`retake`), after the first round's exits were carried out.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass, field

import redis

from archiver.errors import EngineUnavailable, ProgressCorrupt
from crawls import quotas
from crawls.models import (
    Crawl,
    CrawlMessage,
    Process,
    SnapshotStatus,
    StopReason,
    elapsed_with_uncounted,
)
from runner.launchers.base import Instance, instance_index
from runner.progress import Progress
from runner.state import Held, Runtime

REDIS_MEASURE_EVERY = 15.0  # seconds between two measures of a crawl's Redis database


@dataclass(frozen=True)
class Observation:
    crawl: Crawl
    now: dt.datetime
    processes: list[Process]
    instances: dict[int, Instance | None] = field(default_factory=dict)  # by Process pk; absent = unknown
    engine_down: bool = False
    progress: Progress | None = None
    fault: tuple[str, str] | None = None  # ("unreachable" | "corrupt", what)
    disk_reason: str | None = None
    limit_reason: str | None = None
    limit_message: str = ""
    messages: list[CrawlMessage] = field(default_factory=list)
    has_files: bool = False
    progress_values: dict = field(default_factory=dict)
    # The crawlers' own statuses by instance number, from `progress` (hosts of other names
    # left out): computed when the observation is made, so reading it runs no code.
    instance_statuses: dict[int, str] = field(init=False)

    def __post_init__(self):
        found = {}
        for host, status in (self.progress.statuses if self.progress else {}).items():
            index = instance_index(self.crawl.pk, host)
            if index is not None:
                found[index] = status
        object.__setattr__(self, "instance_statuses", found)  # frozen: set once, here


def observe(rt: Runtime, crawl: Crawl, held: Held, now: dt.datetime, processes: list[Process],
            messages: list[CrawlMessage]) -> Observation:
    instances, engine_down = read_instances(rt, processes)
    progress, fault = read_progress(rt, crawl, held)
    if held.files_bytes is None:
        held.files_bytes = files_bytes(crawl)
    values, (limit_reason, limit_message) = {}, (None, "")
    if progress is not None:
        values = progress_values(crawl, progress, held.files_bytes)
        limit_reason, limit_message = (check_limits(crawl, values, processes, now)
                                       or check_redis_budget(rt, crawl, held, now) or (None, ""))
    return Observation(
        crawl=crawl, now=now, processes=list(processes), instances=instances,
        engine_down=engine_down, progress=progress, fault=fault, disk_reason=rt.disk_reason,
        limit_reason=limit_reason, limit_message=limit_message, messages=list(messages),
        has_files=held.files_bytes > 0,  # no query per tick: kept files are never empty
        progress_values=values)


def retake(rt: Runtime, first: Observation, held: Held, exited: bool) -> Observation:
    """What the second round decides on, taken again after the first round's actions: the
    statuses after an exit (an instance may have written its final status after the first
    read), the rows still live, and whether the crawl has archives now that the exits'
    sessions are kept. The rest is as the first look saw it."""
    progress = first.progress
    if progress is not None and exited:
        progress = dataclasses.replace(progress, statuses=rt.store.statuses(first.crawl.redis_db,
                                                                            first.crawl.pk))
    return dataclasses.replace(first, progress=progress, has_files=bool(held.files_bytes),
                               processes=[p for p in first.processes if p.is_live])


def read_progress(rt: Runtime, crawl: Crawl, held: Held) -> tuple[Progress | None, tuple[str, str] | None]:
    """The crawl's progress in one pipeline, or the fault that kept it from being read."""
    try:
        return rt.store.read(crawl.redis_db, crawl.pk, failed_offset=failed_offset(crawl, held)), None
    except ProgressCorrupt as exc:
        return None, ("corrupt", str(exc))
    except redis.RedisError as exc:
        return None, ("unreachable", type(exc).__name__)


def read_instances(rt: Runtime, processes: list[Process]) -> tuple[dict[int, Instance | None], bool]:
    """Each started instance as this tick's listing shows it (or the engine, for one launched
    after the listing), by Process pk, and whether the engine is away. An engine that is
    away makes them all unknown, after one timeout, and nothing is launched this tick (a
    launch would only wait for it again)."""
    instances: dict[int, Instance | None] = {}
    for process in processes:
        if rt.listed is None:
            return instances, True
        if process.started_at is None:
            continue
        ref = rt.launcher.ref_of(process)
        if ref in rt.listed:
            instances[process.pk] = rt.listed[ref]
            continue
        try:
            instances[process.pk] = rt.launcher.inspect(ref)
        except EngineUnavailable:
            rt.listed = None  # do not wait for the engine again this tick
    return instances, rt.listed is None


def failed_offset(crawl: Crawl, held: Held) -> int:
    """Where to go on reading <id>:f. A failed-pages session has a Redis database of its
    own, so it starts at 0; otherwise pages_failed is the length already read."""
    if held.failed_read is None:
        held.failed_read = 0 if crawl.config_override else crawl.pages_failed
    return held.failed_read


def files_bytes(crawl: Crawl) -> int:
    return sum(crawl.files.values_list("size", flat=True))


def progress_values(crawl: Crawl, progress: Progress, kept: int) -> dict:
    """The counters the crawl should show now."""
    if crawl.config_override:
        # A failed-pages session: the crawler counts from 0, the crawl keeps its pages.
        return {"pages_done": crawl.snapshots.filter(status=SnapshotStatus.DONE).count(),
                "pages_failed": crawl.failed_pages().count(), "size_bytes": progress.size + kept}
    return {"pages_done": progress.done, "pages_found": max(progress.found, progress.done),
            "pages_failed": progress.failed, "size_bytes": progress.size + kept}


def check_limits(crawl: Crawl, values: dict, processes: list[Process],
                 now: dt.datetime) -> tuple[str, str] | None:
    """The first limit or quota the crawl has reached with this tick's fresh numbers
    (`values`): its reason and the message that says it; None when none is reached."""
    if crawl.intent == "cancel" or crawl.stop_reason:
        return None
    probe = copy.copy(crawl)
    for name, value in values.items():
        setattr(probe, name, value)
    # Counted time plus the longest uncounted run: a time limit holds within one tick.
    probe.elapsed_seconds = elapsed_with_uncounted(crawl.elapsed_seconds, processes, now)
    usage = org_usage(crawl, now)
    reason = probe.stop_reason_due(usage)
    return (reason, quotas.stop_message(probe, reason, usage)) if reason else None


def check_redis_budget(rt: Runtime, crawl: Crawl, held: Held, now: dt.datetime) -> tuple[str, str] | None:
    """Over ARCHIVER_CRAWL_REDIS_MAX_BYTES in its Redis database, beyond the dedup index the
    runner handed it: a crawler filling the server that every crawl shares. Measured every
    REDIS_MEASURE_EVERY seconds, and every tick once the server holds more than half its
    maxmemory: a crawler writing fast is caught before the server refuses the others'
    writes. A crawl already stopping is measured too: stopping does not stop a crawler."""
    if crawl.intent == "cancel" or crawl.redis_db is None:
        return None
    try:
        if held.redis_measured_at and (now - held.redis_measured_at).total_seconds() < REDIS_MEASURE_EVERY \
                and not redis_pressed(rt, now):
            return None
        held.redis_measured_at = now
        used = rt.store.memory(crawl.redis_db)
    except redis.ResponseError as exc:  # a server refusing MEMORY USAGE, SCAN or DBSIZE
        if rt.episodes.begin("redis-memory"):
            rt.event(f"Redis cannot measure a crawl's database ({str(exc)[:80]}); "
                     "ARCHIVER_CRAWL_REDIS_MAX_BYTES is not enforced", logging.WARNING)
        return None
    except redis.RedisError:
        return None  # unreachable: the next read says so
    budget = rt.settings.crawl_redis_max_bytes
    if used <= budget + crawl.dedup_index_bytes:
        return None
    handed = (f" besides the {quotas.human_size(crawl.dedup_index_bytes)} of its dedup index"
              if crawl.dedup_index_bytes else "")
    return StopReason.REDIS_BUDGET, (f"its Redis database holds {quotas.human_size(used)}, over "
                                     f"the {quotas.human_size(budget)} a crawl may use there{handed} "
                                     "(ARCHIVER_CRAWL_REDIS_MAX_BYTES)")


def redis_pressed(rt: Runtime, now: dt.datetime) -> bool:
    """ProgressStore.pressed(), asked once per tick (`now` is the tick's) for all crawls."""
    if rt.redis_pressed is None or rt.redis_pressed[0] != now:
        rt.redis_pressed = (now, rt.store.pressed())
    return rt.redis_pressed[1]


def org_usage(crawl: Crawl, now: dt.datetime) -> quotas.OrgUsageNow:
    org = crawl.org
    if org.storage_quota_bytes is None and org.exec_minutes_quota is None:
        return quotas.OrgUsageNow(bytes_stored=0)  # nothing to compare: skip the queries
    return quotas.OrgUsageNow.read(org, now)

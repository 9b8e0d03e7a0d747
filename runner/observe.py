"""What the runner knows about one held crawl this tick, read without writing anything.

`observe()` reads the crawl's live Process rows, its instances (from this tick's listing, or
the engine), its progress from Redis in one pipeline, and the org usage its limits need;
decide.py turns the Observation into actions. A Redis fault is part of the observation
(`fault`), not an exception: deciding what it means is decide.py's job.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
from dataclasses import dataclass, field

import redis

from archiver.errors import EngineUnavailable, ProgressCorrupt
from crawls import quotas
from crawls.models import Crawl, CrawlMessage, Process, SnapshotStatus, StopReason
from runner.decide import elapsed_now, instance_index
from runner.progress import Progress
from runner.state import Held, Runtime

REDIS_MEASURE_EVERY = 15.0  # seconds between two measures of a crawl's Redis database


@dataclass
class Observation:
    crawl: Crawl
    now: dt.datetime
    processes: list[Process]
    instances: dict[int, object] = field(default_factory=dict)  # by Process pk; absent = unknown
    engine_down: bool = False
    progress: Progress | None = None
    fault: tuple[str, str] | None = None  # ("unreachable" | "corrupt", what)
    disk_reason: str | None = None
    limit_reason: str | None = None
    limit_message: str = ""
    messages: list[CrawlMessage] = field(default_factory=list)
    has_files: bool = False
    progress_values: dict = field(default_factory=dict)

    @property
    def instance_statuses(self) -> dict[int, str]:
        """The crawlers' own statuses, by instance number."""
        if self.progress is None:
            return {}
        found = {}
        for host, status in self.progress.statuses.items():
            index = instance_index(self.crawl.pk, host)
            if index is not None:
                found[index] = status
        return found


def observe(rt: Runtime, crawl: Crawl, held: Held, now: dt.datetime, processes: list[Process],
            messages: list[CrawlMessage]) -> Observation:
    obs = Observation(crawl=crawl, now=now, processes=processes, messages=list(messages),
                      disk_reason=rt.disk_reason)
    read_instances(rt, obs)
    try:
        obs.progress = rt.store.read(crawl.redis_db, crawl.pk, failed_offset=failed_offset(crawl, held))
    except ProgressCorrupt as exc:
        obs.fault = ("corrupt", str(exc))
    except redis.RedisError as exc:
        obs.fault = ("unreachable", type(exc).__name__)
    if held.files_bytes is None:
        held.files_bytes = files_bytes(crawl)
    obs.has_files = held.files_bytes > 0  # no query per tick: kept files are never empty
    if obs.progress is not None:
        obs.progress_values = progress_values(crawl, obs.progress, held.files_bytes)
        check_limits(obs, crawl, processes, now)
        check_redis_budget(rt, obs, held, now)
    return obs


def read_instances(rt: Runtime, obs: Observation) -> None:
    """Each started instance as this tick's listing shows it (or the engine, for one launched
    after the listing). An engine that is away makes them all unknown, after one timeout,
    and nothing is launched this tick (a launch would only wait for it again)."""
    if rt.listed is None:
        obs.engine_down = True
        return
    for process in obs.processes:
        if process.started_at is None:
            continue
        ref = rt.launcher.ref_of(process)
        if rt.listed is None:
            obs.engine_down = True
            return
        if ref in rt.listed:
            obs.instances[process.pk] = rt.listed[ref]
            continue
        try:
            obs.instances[process.pk] = rt.launcher.inspect(ref)
        except EngineUnavailable:
            rt.listed = None  # do not wait for the engine again this tick
            obs.engine_down = True


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


def check_limits(obs: Observation, crawl: Crawl, processes: list[Process], now: dt.datetime) -> None:
    """The first limit or quota the crawl has reached with this tick's fresh numbers."""
    if crawl.intent == "cancel" or crawl.stop_reason:
        return
    probe = copy.copy(crawl)
    for name, value in obs.progress_values.items():
        setattr(probe, name, value)
    probe.elapsed_seconds = elapsed_now(crawl.elapsed_seconds, processes, now)
    usage = org_usage(crawl, now)
    reason = probe.stop_reason_due(usage)
    if reason:
        obs.limit_reason = reason
        obs.limit_message = quotas.stop_message(probe, reason, usage)


def check_redis_budget(rt: Runtime, obs: Observation, held: Held, now: dt.datetime) -> None:
    """Over ARCHIVER_CRAWL_REDIS_MAX_BYTES in its Redis database (measured every
    REDIS_MEASURE_EVERY seconds): a crawler filling the server that every crawl shares."""
    crawl = obs.crawl
    if obs.limit_reason or crawl.intent == "cancel" or crawl.stop_reason or crawl.redis_db is None:
        return
    if held.redis_measured_at and (now - held.redis_measured_at).total_seconds() < REDIS_MEASURE_EVERY:
        return
    held.redis_measured_at = now
    try:
        used = rt.store.memory(crawl.redis_db)
    except redis.ResponseError as exc:  # a server refusing MEMORY USAGE, SCAN or DBSIZE
        if rt.episodes.begin("redis-memory"):
            rt.event(f"Redis cannot measure a crawl's database ({str(exc)[:80]}); "
                     "ARCHIVER_CRAWL_REDIS_MAX_BYTES is not enforced", logging.WARNING)
        return
    except redis.RedisError:
        return  # unreachable: the next read says so
    budget = rt.settings.crawl_redis_max_bytes
    if used > budget:
        obs.limit_reason = StopReason.REDIS_BUDGET
        obs.limit_message = (f"its Redis database holds {quotas.human_size(used)}, over the "
                             f"{quotas.human_size(budget)} a crawl may use there "
                             "(ARCHIVER_CRAWL_REDIS_MAX_BYTES)")


def org_usage(crawl: Crawl, now: dt.datetime) -> quotas.OrgUsageNow:
    org = crawl.org
    if org.storage_quota_bytes is None and org.exec_minutes_quota is None:
        return quotas.OrgUsageNow(bytes_stored=0)  # nothing to compare: skip the queries
    return quotas.OrgUsageNow.read(org, now)

"""The org-wide rules of the crawl lifecycle: who may start, quotas, execution time.

The crawl's own rules (limits, stalls, the pause limit, its org's quotas given the org's
usage, `OrgUsageNow`) are model methods (crawls/models/crawl_limits.py, org.py); the rules
here need the org's other crawls. This module depends on the models, never the reverse.
Each rule has a pure core that takes rows, numbers and `now`, so tests pin every boundary
without Docker or Redis, and a thin function that reads what the core needs from the
database. docs/lifecycle.md says when
the runner calls what.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import F, Q

from crawls import admission
from crawls.config import human_duration, human_size
from crawls.models import (
    Crawl,
    CrawlStatus,
    Org,
    OrgUsage,
    OrgUsageNow,
    Process,
    ProcessStatus,
    StopReason,
)

log = logging.getLogger(__name__)
S = CrawlStatus


def stop_message(crawl: Crawl, reason: str, usage: OrgUsageNow) -> str:
    """The sentence a person reads about why a crawl stops or was skipped."""
    org, config = crawl.org, crawl.config
    if reason == StopReason.STORAGE_QUOTA:
        return (f"org '{org.slug}' storage quota reached: {human_size(usage.storage_bytes)} "
                f"of {human_size(org.storage_quota_bytes)} used")
    if reason == StopReason.EXEC_QUOTA:
        return (f"org '{org.slug}' execution quota reached: {human_duration(usage.exec_seconds)} "
                f"of {human_duration(org.exec_minutes_quota * 60)} used this month")
    if reason == StopReason.TIME_LIMIT:
        return (f"time limit reached: ran {human_duration(crawl.elapsed_seconds)} of its "
                f"{human_duration(config['time_limit'])} limit")
    if reason == StopReason.SIZE_LIMIT:
        return (f"size limit reached: {human_size(crawl.size_bytes)} of "
                f"{human_size(config['size_limit'])}")
    if reason == StopReason.PAGE_LIMIT:
        return f"page limit reached: {crawl.pages_done} of {crawl.effective_page_limit()} pages"
    return str(reason)


# --- may a crawl start? --------------------------------------------------------------------


@dataclass(frozen=True)
class OrgAdmission:
    """Which of an org's waiting crawls start now; the others with the reason they wait."""

    start: tuple[Crawl, ...]
    waiting: dict[str, str] = field(default_factory=dict)


def admit_by_org(org: Org, running: int, waiting: Sequence[Crawl]) -> OrgAdmission:
    """The oldest waiting crawls start while the org has room; `running` = its running crawls."""
    ordered = sorted(waiting, key=lambda crawl: (crawl.created_at, crawl.id))
    limit = org.max_concurrent_crawls
    room = len(ordered) if limit is None else max(limit - running, 0)
    start = tuple(ordered[:room])
    reason = f"waiting: org '{org.slug}' already runs {running + len(start)} of {limit} crawls"
    return OrgAdmission(start=start, waiting={crawl.id: reason for crawl in ordered[room:]})


def org_wait_reason(crawl: Crawl) -> str | None:
    """Why `crawl` must wait for its org's other crawls, or None if it may start now."""
    org = crawl.org
    if org.max_concurrent_crawls is None:
        return None
    running = Crawl.objects.filter(org=org).running().exclude(pk=crawl.pk).count()
    waiting = list(
        Crawl.objects.filter(org=org, status__in=S.NOT_STARTED).exclude(pk=crawl.pk)
        .only("id", "created_at")
    )
    return admit_by_org(org, running, [*waiting, crawl]).waiting.get(crawl.id)


@dataclass(frozen=True)
class StartDecision:
    """What the runner does with a claimed crawl that is not running yet.

    `status` None means launch it. Otherwise move it to `status`: a waiting state (with
    `reason` as its waiting_reason, due again after a poll interval) or a final state
    (with `stop_reason`, and `reason` as its error).
    """

    status: str | None = None
    reason: str = ""
    stop_reason: str = ""

    @property
    def start(self) -> bool:
        return self.status is None


HostCheck = Callable[[Crawl], "str | None"]


def start_decision(crawl: Crawl, now: dt.datetime, host_check: HostCheck | None = None) -> StartDecision:
    """Quotas first (a full org never starts), then the org's concurrency, then the host."""
    usage = OrgUsageNow.read(crawl.org, now)
    quota = crawl.quota_reached(usage)
    if quota:
        # A crawl that already ran (resumed, or waiting again) is stopped, not skipped.
        status = S.STOPPED_QUOTA_REACHED if crawl.started_at else S.SKIPPED_QUOTA_REACHED
        return StartDecision(status, stop_message(crawl, quota, usage), quota)
    reason = org_wait_reason(crawl)
    if reason:
        return StartDecision(S.WAITING_ORG_LIMIT, reason)
    reason = (host_check or admission.crawl_wait_reason)(crawl)
    if reason:
        return StartDecision(S.WAITING_CAPACITY, reason)
    return StartDecision()


# --- execution time ------------------------------------------------------------------------


def next_month(moment: dt.datetime) -> dt.datetime:
    """Midnight UTC of the first day of the month after `moment`'s."""
    first = moment.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return (first + dt.timedelta(days=32)).replace(day=1)


def month_parts(since: dt.datetime, until: dt.datetime) -> list[tuple[dt.date, float]]:
    """The seconds from `since` to `until`, split at UTC month boundaries: (month, seconds)."""
    since, until = since.astimezone(dt.UTC), until.astimezone(dt.UTC)
    parts = []
    while since < until:
        end = min(next_month(since), until)
        parts.append((since.date().replace(day=1), (end - since).total_seconds()))
        since = end
    return parts


def uncounted_span(counted_until: dt.datetime | None, started_at: dt.datetime | None,
                   ended_at: dt.datetime | None, now: dt.datetime,
                   running: bool) -> tuple[dt.datetime, dt.datetime] | None:
    """The running time of a process not yet counted, or None.

    It runs from `counted_until` (or its start) to `now` while it runs, else to its end.
    A process that vanished without an end time adds nothing more.
    """
    since = counted_until or started_at
    until = now if running else ended_at
    if since is None or until is None or until <= since:
        return None
    return since, until


def exec_seconds_to_add(counted_until, started_at, ended_at, now, running) -> list[tuple[dt.date, float]]:
    """The seconds to count for one process, per UTC calendar month (pure)."""
    span = uncounted_span(counted_until, started_at, ended_at, now, running)
    return month_parts(*span) if span else []


def count_process_time(process: Process, now: dt.datetime, org_id: int | None = None) -> float:
    """Count a process's running time up to now, once: to its crawl and its org's months.

    The UPDATE that advances `counted_until` is guarded on its old value, so when two
    callers count the same span only one adds it.
    """
    running = process.status == ProcessStatus.RUNNING
    span = uncounted_span(process.counted_until, process.started_at, process.ended_at, now, running)
    if span is None:
        return 0.0
    parts = month_parts(*span)
    total = sum(seconds for _, seconds in parts)
    org_id = org_id or Crawl.objects.values_list("org_id", flat=True).get(pk=process.crawl_id)
    with transaction.atomic():
        if not process.mark_counted(span[1]):
            log.info("process %s was counted by someone else; not counting it twice", process.pk)
            return 0.0
        for month, seconds in parts:
            OrgUsage.add_exec_seconds(org_id, month, seconds)
        Crawl.objects.filter(pk=process.crawl_id).add_exec_seconds(total)
    return total


def count_crawl_time(crawl: Crawl, now: dt.datetime) -> float:
    """Count every instance's new running time; the crawl's elapsed time grows by the longest.

    Returns the elapsed seconds added. Call it at least every 60 s while a crawl runs, when
    an instance exits, and before the crawl finishes.
    """
    uncounted = crawl.processes.filter(
        Q(status=ProcessStatus.RUNNING)
        | Q(ended_at__isnull=False, started_at__isnull=False)
        & (Q(counted_until__isnull=True) | Q(counted_until__lt=F("ended_at")))
    )
    added = [count_process_time(process, now, crawl.org_id) for process in uncounted]
    total, longest = sum(added), max(added, default=0.0)
    if longest:
        Crawl.objects.filter(pk=crawl.pk).add_elapsed_seconds(longest)
        crawl.elapsed_seconds += longest
    crawl.exec_seconds += total
    return longest

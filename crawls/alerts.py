"""Change alerts: a schedule's crawl compared with its previous complete crawl, restricted to
what the schedule watches, and a `crawl.changed` event when something watched changed.

    watch = alerts.parse_watch(pages=False, urls=[...], selector=None)   # ValueError if bad
    alerts.set_watch(schedule, watch, now)
    alerts.check_changes(owner, now)          # the runner's periodic step: True if it found work

A watch is stored on the schedule as JSON: null (no alerts, the default), {"pages": true}
(every page), {"urls": [...]} or {"selector": "main .price"} (crawls/selectors.py).

Where it runs: not in supervision. When a watched schedule's crawl has completed, the step
writes one ChangeCheck row for it (unique per crawl), then claims due checks through the
lease, a few per pass, and compares. The check's outcome and the event are written in one
transaction guarded by the lease token, and the event has a unique key (crawl, name), so the
event exists once per crawl across restarts and runners; its deliveries go through the
outbox like every other event's.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import IntegrityError, transaction
from django.db.models import F

from crawls import diffing
from crawls.models import ChangeCheck, ChangeCheckStatus, Crawl, CrawlEvent, CrawlStatus, Schedule
from crawls.selectors import Selector

log = logging.getLogger(__name__)

EVENT = "crawl.changed"
LEASE_SECONDS = 300  # comparing two large crawls reads their indexes and some bodies
ATTEMPTS = 5
RETRY = dt.timedelta(minutes=1)  # doubled after each failed attempt
MAX_LISTED = 1000  # pages of each kind named in one event; the counts are always whole
MAX_URLS = 1000


def parse_watch(pages: bool = False, urls=(), selector: str | None = None) -> dict | None:
    """The watch to store; None for none. ValueError with the reason if the input is bad."""
    urls = list(dict.fromkeys(url.strip() for url in urls if url.strip()))
    given = sum((bool(pages), bool(urls), selector is not None))
    if given > 1:
        raise ValueError("watch whole pages, a list of URLs or a CSS selector: one of them")
    if urls:
        if len(urls) > MAX_URLS:
            raise ValueError(f"at most {MAX_URLS} URLs may be watched")
        normalised = [diffing.normalize_url(url) for url in urls]
        bad = [url for url, norm in zip(urls, normalised, strict=True) if norm is None]
        if bad:
            raise ValueError(f"{bad[0]!r} is not an http(s) URL")
        return {"urls": normalised}
    if selector is not None:
        return {"selector": Selector.parse(selector).source}
    return {"pages": True} if pages else None


def describe(watch: dict | None) -> str:
    if not watch:
        return "-"
    if watch.get("urls"):
        return f"{len(watch['urls'])} URL(s)"
    if watch.get("selector"):
        return f"css {watch['selector']}"
    return "pages"


def watch_since(schedule: Schedule, watch: dict | None, now: dt.datetime) -> dt.datetime | None:
    """When a watch counts from: when it was first set (a changed watch keeps it), None for none."""
    return (schedule.watch_since or now) if watch else None


def set_watch(schedule: Schedule, watch: dict | None, now: dt.datetime) -> None:
    """Watch from now on: crawls that ended before are never compared (no alerts for history)."""
    since = watch_since(schedule, watch, now)
    Schedule.objects.filter(pk=schedule.pk).update(watch=watch, watch_since=since)
    schedule.watch, schedule.watch_since = watch, since


# --- the runner's step ---------------------------------------------------------------------


def check_changes(owner: str, now: dt.datetime, limit: int = 2, settings=None) -> bool:
    """Queue a check per newly completed watched crawl, then compare up to `limit` due ones."""
    queued = queue_checks(now)
    claims = ChangeCheck.objects.filter(status=ChangeCheckStatus.PENDING).claim(
        owner, now, LEASE_SECONDS, limit=limit)
    for claim in claims:
        check(claim.pk, claim.token, now, settings)
    return bool(queued or claims)


def queue_checks(now: dt.datetime, limit: int = 50) -> int:
    waiting = (Crawl.objects.filter(status=CrawlStatus.COMPLETE, schedule__watch__isnull=False,
                                    finished_at__gte=F("schedule__watch_since"),
                                    change_check__isnull=True)
               .order_by("finished_at").values_list("pk", flat=True)[:limit])
    made = 0
    for pk in waiting:
        _check, created = ChangeCheck.objects.get_or_create(
            crawl_id=pk, defaults={"retry_at": now, "created_at": now})
        made += created
    return made


def previous_complete(crawl: Crawl) -> Crawl | None:
    return (Crawl.objects.filter(schedule_id=crawl.schedule_id, status=CrawlStatus.COMPLETE,
                                 finished_at__lt=crawl.finished_at)
            .exclude(pk=crawl.pk).order_by("-finished_at").first())


def check(pk: int, token: int, now: dt.datetime, settings=None) -> None:
    """One claimed check: compare, then record the outcome (and the event) or retry later."""
    change_check = ChangeCheck.objects.select_related("crawl__org", "crawl__schedule").get(pk=pk)
    crawl = change_check.crawl
    watch = crawl.schedule.watch if crawl.schedule else None
    previous = previous_complete(crawl) if watch else None
    if previous is None:
        change_check.finish(token, changed=False, counts={})
        return
    try:
        diff = diffing.compare(previous, crawl, watch=watch, settings=settings)
    except (diffing.DiffRefused, ValueError) as exc:
        failed(change_check, token, now, str(exc))
        return
    record(change_check, token, previous, diff, now)


def failed(change_check: ChangeCheck, token: int, now: dt.datetime, error: str) -> None:
    log.warning("crawl %s: cannot compare with its previous crawl: %s",
                change_check.crawl.short_id, error)
    if change_check.attempts + 1 >= ATTEMPTS:
        change_check.give_up(token, error)
    else:
        change_check.retry_later(token, now + RETRY * 2 ** change_check.attempts, error)


def record(change_check: ChangeCheck, token: int, previous: Crawl, diff, now: dt.datetime) -> None:
    crawl = change_check.crawl
    try:
        with transaction.atomic():
            if not change_check.finish(token, changed=diff.anything_changed, counts=diff.counts,
                                       previous=previous):
                log.warning("lost the lease on the change check of %s; leaving it", crawl.short_id)
                return
            if diff.anything_changed:
                CrawlEvent.record(crawl, EVENT, now, extra={"changes": changes(previous, diff)})
    except IntegrityError:  # recorded already: the unique key held
        log.info("crawl %s: crawl.changed was recorded already", crawl.short_id)
        return
    if diff.anything_changed:
        log.info("crawl %s changed since %s: %s", crawl.short_id, previous.short_id, diff.counts)


def changes(previous: Crawl, diff) -> dict:
    """The event's `changes`: the counts, and the pages (at most MAX_LISTED of each kind)."""
    return {
        "previous": previous.id,
        "watch": diff.watch,
        "counts": diff.counts,
        "added": diff.added[:MAX_LISTED],
        "removed": diff.removed[:MAX_LISTED],
        "changed": [{"url": c.url, "similarity": c.similarity} for c in diff.changed[:MAX_LISTED]],
        "truncated": max(len(diff.added), len(diff.removed), len(diff.changed)) > MAX_LISTED,
    }

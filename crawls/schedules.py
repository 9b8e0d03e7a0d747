"""Schedules: a cron entry that queues a crawl of a stored configuration at each slot.

A schedule is a leased row whose `retry_at` is its next slot (UTC). The runner calls
`fire_due_schedules()` every tick: it claims the due schedules, queues one crawl each
(unless the schedule's previous crawl is still active: never two at once), and moves
`retry_at` to the first slot after now, so a run missed during downtime happens once,
not once per missed slot.
"""

from __future__ import annotations

import datetime as dt
import logging

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from django.db import transaction

from archiver.errors import ConfigError, NotAllowed
from crawls.config import CrawlConfig
from crawls.lease import Claim
from crawls.models import BrowserProfile, Crawl, Org, Schedule

log = logging.getLogger(__name__)

LEASE_SECONDS = 60
BROKEN_RETRY = dt.timedelta(hours=1)  # a schedule whose cron cannot be read is looked at hourly
CRON_HELP = "five fields: minute hour day-of-month month day-of-week, e.g. '0 3 * * *'"


def check_cron(expression: str) -> str:
    """The expression, normalised; ValueError with a readable reason if it is not cron."""
    expression = " ".join(expression.split())
    five_fields = len(expression.split()) == 5 or expression.startswith("@")
    if not five_fields or not croniter.is_valid(expression):
        raise ValueError(f"{expression!r} is not a valid cron expression ({CRON_HELP})")
    try:
        next_slot(expression, dt.datetime(2001, 1, 1, tzinfo=dt.UTC))
    except ValueError:
        raise ValueError(f"{expression!r} never happens (is the day in the month?)") from None
    return expression


def next_slot(expression: str, after: dt.datetime) -> dt.datetime:
    """The first slot of `expression` strictly after `after`, in UTC."""
    try:
        return croniter(expression, after.astimezone(dt.UTC)).get_next(dt.datetime)
    except (CroniterBadCronError, CroniterBadDateError) as exc:
        raise ValueError(f"{expression!r}: {exc}") from None


def create_schedule(org: Org, cron: str, config: CrawlConfig, tags=(), now=None) -> Schedule:
    """A new enabled schedule, first due at its first slot after `now`."""
    cron = check_cron(cron)
    BrowserProfile.require(org, config.profile)
    return Schedule.objects.create(
        org=org, cron=cron, config=config.model_dump(mode="json"), tags=list(tags),
        enabled=True, retry_at=next_slot(cron, now), created_at=now,
    )


def enable(schedule: Schedule, now: dt.datetime) -> None:
    """Enable it again from its next slot after now (the slots it missed are not run)."""
    retry_at = next_slot(schedule.cron, now)
    Schedule.objects.filter(pk=schedule.pk).update(enabled=True, retry_at=retry_at, lease_owner="")
    schedule.enabled, schedule.retry_at, schedule.lease_owner = True, retry_at, ""


def disable(schedule: Schedule) -> None:
    """Off until enabled; enabling computes its next slot again."""
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False, retry_at=None, lease_owner="")
    schedule.enabled, schedule.retry_at, schedule.lease_owner = False, None, ""


def find(pk: str) -> Schedule:
    if not pk.isdigit():
        raise NotAllowed(f"{pk!r} is not a schedule id (ids are numbers; see: schedule list)")
    try:
        return Schedule.objects.select_related("org", "last_crawl").get(pk=int(pk))
    except Schedule.DoesNotExist:
        raise NotAllowed(f"no schedule {pk}") from None


# --- the runner's step ---------------------------------------------------------------------


def fire_due_schedules(owner: str, now: dt.datetime, limit: int = 20) -> bool:
    """Queue the crawls of the due enabled schedules; True if any schedule was due."""
    claims = Schedule.objects.filter(enabled=True).claim(owner, now, LEASE_SECONDS, limit=limit)
    for claim in claims:
        fire(claim, now)
    return bool(claims)


def fire(claim: Claim, now: dt.datetime) -> Crawl | None:
    """One claimed schedule: its crawl (or none if the last one still runs), then its next slot."""
    schedule = Schedule.objects.select_related("org").get(pk=claim.pk)
    try:
        following = next_slot(schedule.cron, now)
    except ValueError as exc:
        log.error("schedule %s has a cron that cannot be read: %s", schedule.pk, exc)
        Schedule.objects.release(schedule.pk, claim.token, now + BROKEN_RETRY)
        return None
    with transaction.atomic():
        crawl = queue_crawl(schedule, now)
        fields = {"retry_at": following, "lease_owner": ""}
        if crawl:
            fields["last_crawl"] = crawl
        if not Schedule.objects.filter(pk=schedule.pk, lease_token=claim.token).update(**fields):
            # Our lease was lost: whoever holds it now fires this slot, not us.
            transaction.set_rollback(True)
            log.warning("lost the lease on schedule %s; not queueing its crawl", schedule.pk)
            return None
    return crawl


def queue_crawl(schedule: Schedule, now: dt.datetime) -> Crawl | None:
    active = schedule.crawls.active().first()
    if active:
        log.info("schedule %s: crawl %s is still %s; skipping the slot of %s",
                 schedule.pk, active.short_id, active.status, now.isoformat())
        return None
    try:
        config = CrawlConfig.parse(**schedule.config)
        crawl = Crawl.create(schedule.org, config, tags=schedule.tags, schedule=schedule, now=now)
    except ConfigError as exc:  # e.g. browser options the configured crawler no longer takes
        log.error("schedule %s has an invalid crawl configuration, skipping it: %s", schedule.pk, exc)
        return None
    log.info("schedule %s queued crawl %s", schedule.pk, crawl.short_id)
    return crawl

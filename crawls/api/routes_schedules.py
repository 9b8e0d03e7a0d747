"""/schedules: `archiver schedule add|list|enable|disable|watch`."""

from __future__ import annotations

import json

from django.db import transaction
from ninja import Router, Status

from archiver.errors import NotAllowed
from crawls import alerts, schedules, wake
from crawls.actions import check_tags
from crawls.api.auth import default_org_slug, need, scope_org_id, visible_orgs
from crawls.api.errors import ERRORS, ApiError, invalid, not_found
from crawls.api.routes_crawls import read_json_object
from crawls.api.schemas import RowId, ScheduleChanged, ScheduleOut
from crawls.config import CrawlConfig
from crawls.lease import db_now
from crawls.management.commands.schedule import iso, summary
from crawls.models import Schedule

router = Router(tags=["schedules"])


def visible_schedules(request):
    rows = Schedule.objects.select_related("org", "last_crawl").order_by("id")
    org_id = scope_org_id(request)
    return rows if org_id is None else rows.filter(org_id=org_id)


def find_schedule(request, schedule_id: RowId) -> Schedule:
    schedule = visible_schedules(request).filter(pk=schedule_id).first()
    if schedule is None:
        raise not_found(f"no schedule {schedule_id}")
    return schedule


@router.get("/schedules", response={200: list[ScheduleOut], **ERRORS}, summary="Schedules")
def list_schedules(request):
    need(request, "crawls.view_schedule")
    return [summary(s) for s in visible_schedules(request)]


@router.get("/schedules/{int:schedule_id}", response={200: ScheduleOut, **ERRORS}, summary="One schedule")
def get_schedule(request, schedule_id: RowId):
    need(request, "crawls.view_schedule")
    return summary(find_schedule(request, schedule_id))


WATCH_SCHEMA = {
    "type": ["object", "null"], "additionalProperties": False,
    "description": "What change alerts (crawl.changed) watch, one of: whole pages, URLs, a CSS selector.",
    "properties": {"pages": {"type": "boolean"}, "urls": {"type": "array", "items": {"type": "string"}},
                   "selector": {"type": "string"}},
}


def read_watch(value) -> dict | None:
    """A body's `watch`, checked as `archiver schedule watch` checks its flags; 422 if bad."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"pages", "urls", "selector"}:
        raise invalid('watch is null or an object with one of "pages", "urls", "selector"')
    pages, urls, selector = value.get("pages", False), value.get("urls", []), value.get("selector")
    if not isinstance(pages, bool) or not isinstance(urls, list) \
            or not all(isinstance(url, str) for url in urls) or not isinstance(selector, str | None):
        raise invalid("watch: pages is a boolean, urls a list of strings and selector a string")
    try:
        return alerts.parse_watch(pages, urls, selector)
    except ValueError as exc:
        raise invalid(f"watch: {exc}") from None


def schedule_body_schema() -> dict:
    from crawls.api.routes_crawls import create_body_schema

    schema = create_body_schema()
    schema["properties"]["cron"] = {"type": "string", "description": "five fields, UTC, e.g. `0 3 * * *`"}
    schema["properties"]["watch"] = WATCH_SCHEMA
    schema["required"] = ["cron", *schema.get("required", [])]
    return schema


@router.post("/schedules", response={201: ScheduleChanged, **ERRORS},
             summary="Queue a crawl at every slot of a cron expression (UTC)",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": schedule_body_schema()}}}})
def create_schedule(request):
    """The body is a crawl configuration with `org`, `tags` and `cron`."""
    need(request, "crawls.add_schedule")
    values = read_json_object(request)
    cron, slug, tags = values.pop("cron", None), values.pop("org", None), values.pop("tags", [])
    watch = read_watch(values.pop("watch", None))
    slug = slug or default_org_slug(request)
    if not isinstance(cron, str) or not isinstance(slug, str) or not isinstance(tags, list) \
            or not all(isinstance(t, str) for t in tags):
        raise invalid("cron and org must be strings and tags a list of strings")
    try:
        cron = schedules.check_cron(cron)
    except ValueError as exc:
        raise invalid(str(exc)) from None
    tags = check_tags(tags)  # ActionRefused → 422
    config = CrawlConfig.parse(**values)
    org = visible_orgs(request).filter(slug=slug).first()
    if org is None:
        raise not_found(f"no org {slug!r} (create it with: archiver org set {slug})")
    now = db_now()
    with transaction.atomic():
        schedule = schedules.create_schedule(org, cron, config, tags, now=now)
        if watch:
            alerts.set_watch(schedule, watch, now)
    wake.nudge()
    schedule = find_schedule(request, schedule.pk)
    return Status(201, {"message": f"schedule {schedule.pk}: next run {iso(schedule.retry_at)}",
                       "schedule": summary(schedule)})


@router.post("/schedules/{int:schedule_id}/enable", response={200: ScheduleChanged, **ERRORS},
             summary="Enable a schedule from its next slot")
def enable(request, schedule_id: RowId):
    need(request, "crawls.change_schedule")
    schedule = find_schedule(request, schedule_id)
    try:
        schedules.enable(schedule, db_now())
    except (ValueError, NotAllowed) as exc:  # a stored cron that no longer reads
        raise invalid(str(exc)) from None
    wake.nudge()
    return {"message": f"enabled schedule {schedule.pk}: next run {iso(schedule.retry_at)}",
            "schedule": summary(schedule)}


@router.post("/schedules/{int:schedule_id}/disable", response={200: ScheduleChanged, **ERRORS},
             summary="Disable a schedule")
def disable(request, schedule_id: RowId):
    need(request, "crawls.change_schedule")
    schedule = find_schedule(request, schedule_id)
    schedules.disable(schedule)
    return {"message": f"disabled schedule {schedule.pk}", "schedule": summary(schedule)}


@router.post("/schedules/{int:schedule_id}/watch", response={200: ScheduleChanged, **ERRORS},
             summary="What change alerts watch (null or {}: none)",
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": WATCH_SCHEMA}}}})
def watch(request, schedule_id: RowId):
    """As `archiver schedule watch`: crawls that ended before are never compared."""
    need(request, "crawls.change_schedule")
    schedule = find_schedule(request, schedule_id)
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "the request body is not JSON") from None
    watched = None if body in (None, {}) else read_watch(body)
    alerts.set_watch(schedule, watched, db_now())
    said = f"watches {alerts.describe(watched)}" if watched else "watches nothing: no change alerts"
    return {"message": f"schedule {schedule.pk} {said}", "schedule": summary(schedule)}

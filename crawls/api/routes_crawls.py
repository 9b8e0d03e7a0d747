"""/crawls: create, list, read, act on and delete crawls; their pages and logs.

Every action is a function of crawls.actions, as for the CLI and the admin: the API and the
CLI can neither take different paths into the state machine nor say different things. A
refusal (ActionRefused) is answered by crawls.api.errors with the status its kind means.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections import defaultdict
from typing import Annotated

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from ninja import Query, Router, Status
from pydantic import Field

from archiver.errors import NotAllowed
from crawls import actions, diffing
from crawls.api import pagination
from crawls.api.auth import caller, default_org_slug, need, visible_crawls, visible_orgs
from crawls.api.errors import ERRORS, ApiError, DamagedRow, conflict, invalid, not_found
from crawls.api.pagination import MAX_CURSOR
from crawls.api.schemas import (
    ActionOut,
    CrawlOut,
    CrawlPage,
    ExclusionIn,
    LogPage,
    Message,
    PagePage,
    ScaleIn,
    StateFilter,
)
from crawls.config import CrawlConfig
from crawls.lease import db_now
from crawls.management.commands.status import GROUPS
from crawls.models import (
    Crawl,
    CrawlFile,
    IdempotencyKey,
    Org,
    Process,
    ProcessStatus,
    SnapshotStatus,
    review_state,
    review_states,
)

logger = logging.getLogger(__name__)
router = Router(tags=["crawls"])
CrawlId = Annotated[str, Field(min_length=1, max_length=32, description="a crawl id or a unique prefix of it")]
MAX_KEY = 200
# A URL must fit gunicorn's 4 KiB request line even with every character percent-encoded.
MAX_REGEX_IN_URL = 500
KEY_LIFETIME = dt.timedelta(days=1)


# --- reading ---------------------------------------------------------------------------------


FILE_COLUMNS = ("id", "crawl_id", "path", "size", "sha256", "created_at", "signer", "verified_at", "verify_ok",
                "verify_result")


def file_out(crawl_file: CrawlFile | dict) -> dict:
    """A file's metadata, from its row or from its FILE_COLUMNS values (a list's one query)."""
    row = crawl_file if isinstance(crawl_file, dict) else {c: getattr(crawl_file, c) for c in FILE_COLUMNS}
    return {
        "id": row["id"], "crawl": row["crawl_id"], "path": row["path"], "size": row["size"],
        "sha256": row["sha256"], "created_at": row["created_at"],
        "signer": row["signer"], "verified_at": row["verified_at"], "verified": row["verify_ok"],
        "verify_result": row["verify_result"],
        "download_url": f"/api/v1/files/{row['id']}/download",
    }


def crawl_out(crawl: Crawl, now: dt.datetime | None = None, reviews: dict | None = None) -> dict:
    """The crawl's summary (as `status --json` prints it, its running time at `now`, the
    database's clock by default) plus what a live view needs."""
    files = getattr(crawl, "listed_files", None)  # from with_extras()
    if files is None:
        files = crawl.files.order_by("created_at").values(*FILE_COLUMNS)
    return {
        **crawl.summary(now or db_now(), files=[]),
        "intent": crawl.intent or None,
        "config": crawl.config,
        "config_override": crawl.config_override,
        "limits": {
            "page_limit": crawl.effective_page_limit(),
            "size_limit": crawl.config.get("size_limit"),
            "time_limit": crawl.config.get("time_limit"),
        },
        "files": [file_out(f) for f in files],
        "quality_review": review_state(crawl) if reviews is None else reviews.get(crawl.pk),
        "updated_at": crawl.updated_at,
        "progress_at": crawl.progress_at,
    }


def shown(crawl: Crawl, now: dt.datetime | None = None, reviews: dict | None = None) -> CrawlOut:
    """crawl_out as a CrawlOut; DamagedRow if the row cannot be shown. The model is what the
    route returns: pydantic takes an instance of the response's own class as it is, so each
    crawl is validated once, not again when the response is rendered."""
    try:
        return CrawlOut.model_validate(crawl_out(crawl, now, reviews))
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # pydantic's errors are ValueErrors
        raise DamagedRow("crawl", crawl.pk, exc) from exc


def shown_rows(crawls, now: dt.datetime) -> tuple[list[CrawlOut], list[dict]]:
    """(items, errors) of a list: a damaged row fails only itself, named in `errors` and logged."""
    items, errors = [], []
    reviews = review_states(crawl.pk for crawl in crawls)
    for crawl in crawls:
        try:
            items.append(shown(crawl, now, reviews))
        except DamagedRow as exc:
            logger.error("%s", exc, exc_info=exc.__cause__)
            errors.append({"id": exc.row_id, "code": "damaged_row", "message": str(exc)})
    return items, errors


def find_crawl(request, crawl_id: str) -> Crawl:
    """A crawl the caller may see, by id or unique prefix (as the CLI takes it)."""
    crawls = visible_crawls(request)
    # A whole id is found through the primary key; by_prefix's LIKE scans the table on SQLite.
    if len(crawl_id) == 32 and (crawl := crawls.filter(pk=crawl_id.lower()).first()):
        return crawl
    try:
        return crawls.by_prefix(crawl_id)
    except NotAllowed as exc:
        prefix = crawl_id.strip().lower()
        ambiguous = prefix and crawls.filter(id__startswith=prefix)[:2].count() > 1
        raise ApiError(422 if ambiguous else 404, str(exc)) from None


def with_extras(crawls: list[Crawl]) -> list[Crawl]:
    """The listed crawls with their files (`listed_files`) and running processes in one
    query each. Not prefetch_related: it built a related manager and a queryset per crawl and
    a model per file, two thirds of a list page's time (bench/api.py, issue 27); a final
    crawl has no running process, so a page of ended crawls needs no second query."""
    ids = [crawl.pk for crawl in crawls]
    files = defaultdict(list)
    for row in CrawlFile.objects.filter(crawl_id__in=ids).order_by("created_at").values(*FILE_COLUMNS):
        files[row["crawl_id"]].append(row)
    running = defaultdict(list)
    if live := [crawl.pk for crawl in crawls if not crawl.is_final]:
        for process in Process.objects.filter(crawl_id__in=live, status=ProcessStatus.RUNNING):
            running[process.crawl_id].append(process)
    for crawl in crawls:
        crawl.listed_files, crawl.running_processes = files[crawl.pk], running[crawl.pk]
    return crawls


def tagged(crawls, tag: str):
    """Crawls whose tags include `tag` exactly (JSON containment differs per database)."""
    if connection.vendor == "postgresql":
        return crawls.filter(tags__contains=[tag])
    return crawls.extra(  # noqa: S610 - a constant clause; the tag is a parameter
        where=["EXISTS (SELECT 1 FROM json_each(crawls_crawl.tags) WHERE json_each.value = %s)"],
        params=[tag],
    )


@router.get("/crawls", response={200: CrawlPage, **ERRORS}, summary="List crawls, newest first")
def list_crawls(request, state: StateFilter | None = None,
                org: str | None = Query(None, max_length=50), tag: str | None = Query(None, max_length=100),
                limit: int = Query(50, ge=1, le=200), cursor: str | None = Query(None, max_length=MAX_CURSOR)):
    """Filtered by state (a status, `active` or `final`), org slug and tag. Pages continue
    with `next_cursor` (keyset on creation time and id: as fast on page 1000 as on page 1)."""
    need(request, "crawls.view_crawl")
    crawls = visible_crawls(request).order_by("-created_at", "-id")
    if state:
        crawls = crawls.filter(status__in=GROUPS.get(state, [state]))
    if org:
        crawls = crawls.filter(org__slug=org)
    if tag:
        crawls = tagged(crawls, tag)
    if cursor:
        created, crawl_id = pagination.decode(cursor, 2)
        try:
            created_at = dt.datetime.fromisoformat(created)
        except ValueError:
            created_at = None
        if created_at is None or created_at.tzinfo is None:
            raise invalid(f"cursor {cursor[:40]!r} is not one this API gave out")
        crawls = crawls.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=crawl_id))
    rows = list(crawls[:limit + 1])
    more = len(rows) > limit
    rows = with_extras(rows[:limit])
    next_cursor = pagination.encode(rows[-1].created_at.isoformat(), rows[-1].id) if more else None
    items, errors = shown_rows(rows, db_now())
    return {"items": items, "next_cursor": next_cursor, "errors": errors}


@router.get("/crawls/{crawl_id}", response={200: CrawlOut, **ERRORS}, summary="One crawl, with live progress")
def get_crawl(request, crawl_id: CrawlId):
    need(request, "crawls.view_crawl")
    return shown(find_crawl(request, crawl_id))


@router.get("/crawls/{crawl_id}/pages", response={200: PagePage, **ERRORS}, summary="A crawl's pages")
def list_pages(request, crawl_id: CrawlId, failed: bool = False, limit: int = Query(100, ge=1, le=1000),
               cursor: str | None = Query(None, max_length=MAX_CURSOR)):
    """In the order they were recorded; `failed=true` for only the pages the crawler gave up on."""
    need(request, "crawls.view_crawl")
    crawl = find_crawl(request, crawl_id)
    pages = crawl.snapshots.order_by("id")
    if failed:
        pages = pages.filter(status=SnapshotStatus.FAILED)
    after = pagination.int_cursor(cursor)
    if after is not None:
        pages = pages.filter(id__gt=after)
    rows = list(pages.values(*PAGE_FIELDS)[:limit + 1])
    return page_of(rows, limit)


@router.get("/crawls/{crawl_id}/diff/{other_id}", response={200: dict, **ERRORS},
            summary="What changed from one crawl to another")
def diff_crawls(request, crawl_id: CrawlId, other_id: CrawlId, unchanged: bool = False):
    """Pages added, removed, changed (with similarity) and, with `unchanged=true`, unchanged
    (docs/api.md#diff). Both crawls must be ended crawls of one org the token may see."""
    need(request, "crawls.view_crawl")
    a, b = find_crawl(request, crawl_id), find_crawl(request, other_id)
    try:
        return diffing.compare(a, b).summary(unchanged=unchanged)
    except diffing.DiffRefused as exc:
        raise (conflict(str(exc)) if exc.kind == "state" else invalid(str(exc))) from None


PAGE_FIELDS = ("id", "url", "depth", "seed", "status", "http_status", "load_state", "title", "mime",
               "captured_at", "filename", "error")


def page_of(rows: list, limit: int) -> dict:
    more = len(rows) > limit
    rows = rows[:limit]
    return {"items": rows, "next_cursor": pagination.encode(str(rows[-1]["id"])) if more else None}


@router.get("/crawls/{crawl_id}/logs", response={200: LogPage, **ERRORS}, summary="A crawl's log lines")
def list_logs(request, crawl_id: CrawlId, limit: int = Query(100, ge=1, le=1000),
              cursor: str | None = Query(None, max_length=MAX_CURSOR)):
    """Oldest first, `limit` at a time; follow `next_cursor` for more."""
    need(request, "crawls.view_crawl")
    crawl = find_crawl(request, crawl_id)
    logs = crawl.logs.order_by("id")
    after = pagination.int_cursor(cursor)
    if after is not None:
        logs = logs.filter(id__gt=after)
    rows = list(logs.values("id", "created_at", "level", "source", "message", "details")[:limit + 1])
    return page_of(rows, limit)


# --- creating --------------------------------------------------------------------------------


def create_body_schema() -> dict:
    """CrawlConfig's own JSON schema plus `org` and `tags`: the documented request body."""
    schema = CrawlConfig.model_json_schema()
    schema["properties"]["org"] = {"type": "string", "description": "owning org's slug (default: `default`,"
                                   " or the token's org)"}
    schema["properties"]["tags"] = {"type": "array", "items": {"type": "string", "minLength": 1,
                                                                "maxLength": 100}}
    schema["additionalProperties"] = False
    schema.pop("title", None)
    return schema


def read_json_object(request) -> dict:
    """The body as a JSON object: 400 `bad_request` when it cannot be read (as the endpoints
    whose body a schema reads answer), 422 `invalid` when it is JSON but not an object."""
    try:
        values = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the request body is not JSON") from None
    except RecursionError:  # thousands of nested [ or {: no crawl setting is that deep
        raise ApiError(400, "the request body is nested too deeply to read") from None
    if not isinstance(values, dict):
        raise invalid("the request body must be a JSON object")
    return values


def crawl_request(request, values: dict) -> tuple[Org, CrawlConfig, list[str]]:
    """The org, config and tags a body asks for, read as `archiver add` reads them
    (CrawlConfig.parse, then the org; crawls.actions checks the tags)."""
    values = dict(values)
    slug = values.pop("org", None) or default_org_slug(request)
    tags = values.pop("tags", [])
    if not isinstance(slug, str) or not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise invalid("org must be a string and tags a list of strings")
    config = CrawlConfig.parse(**values)  # ConfigError → 422 with its one line
    org = visible_orgs(request).filter(slug=slug).first()
    if org is None:
        raise not_found(f"no org {slug!r} (create it with: archiver org set {slug})")
    return org, config, tags


IDEMPOTENCY_HEADER = {
    "in": "header", "name": "Idempotency-Key", "required": False,
    "description": "Retrying with the same key and body returns the first response and queues "
                   "nothing new; the same key with another body is refused (422).",
    "schema": {"type": "string", "maxLength": MAX_KEY},
}


@router.post(
    "/crawls", response={201: CrawlOut, **ERRORS}, summary="Queue a crawl",
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": create_body_schema()}}},
        "parameters": [IDEMPOTENCY_HEADER],
    },
)
def create_crawl(request):
    """The body is a crawl configuration (as `archiver add` takes it) with `org` and `tags`."""
    need(request, "crawls.add_crawl")
    key = request.headers.get("Idempotency-Key")
    if key is None:
        crawl = actions.add(*crawl_request(request, read_json_object(request)))
        return Status(201, shown(crawl))
    return idempotent_create(request, key)


def idempotent_create(request, key: str):
    if not key or len(key) > MAX_KEY:
        raise invalid(f"Idempotency-Key must be 1 to {MAX_KEY} characters")
    user, token = caller(request)
    body_sha256 = hashlib.sha256(request.body).hexdigest()
    if earlier := first_response(user, token, key, body_sha256):
        return earlier
    values = read_json_object(request)
    try:
        with actions.one_nudge(), transaction.atomic():  # the runner is nudged after the commit
            crawl = actions.add(*crawl_request(request, values))
            response = shown(crawl).model_dump(mode="json")
            IdempotencyKey.objects.filter(user=user, created_at__lt=db_now() - KEY_LIFETIME).delete()
            IdempotencyKey.objects.create(user=user, token=token, key=key, body_sha256=body_sha256,
                                          crawl=crawl, status_code=201, response=response)
    except IntegrityError:
        # A concurrent request with the same key won; its crawl is the one (ours rolled back).
        if earlier := first_response(user, token, key, body_sha256):
            return earlier
        raise
    return Status(201, response)


def first_response(user, token, key: str, body_sha256: str):
    stored = IdempotencyKey.objects.filter(user=user, token=token, key=key).first()
    if stored is None:
        return None
    if stored.body_sha256 != body_sha256:
        raise ApiError(422, f"Idempotency-Key {key!r} was already used with a different request body",
                       code="idempotency_key_reused")
    return Status(stored.status_code, stored.response)


# --- acting ----------------------------------------------------------------------------------


def acted(request, crawl_id: str, act, *args) -> dict:
    """`act(crawl, *args)` of crawls.actions on the crawl, and the sentence the CLI prints."""
    need(request, "crawls.change_crawl")
    crawl = find_crawl(request, crawl_id)
    done = act(crawl, *args)  # ActionRefused → 409 (or 422) with its reason
    return {"message": done.message, "crawl": crawl_out(crawl)}


def action_route(action: str, summary: str):
    return router.post(f"/crawls/{{crawl_id}}/{action}", response={200: ActionOut, **ERRORS},
                       summary=summary)


@action_route("pause", "Pause a crawl (a running one is paused by the runner)")
def pause(request, crawl_id: CrawlId):
    return acted(request, crawl_id, actions.pause)


@action_route("resume", "Resume a paused crawl, or withdraw a pause not carried out yet")
def resume(request, crawl_id: CrawlId):
    return acted(request, crawl_id, actions.resume)


@action_route("stop", "Stop a crawl gracefully, keeping its archive")
def stop(request, crawl_id: CrawlId):
    return acted(request, crawl_id, actions.stop)


@action_route("cancel", "Cancel a crawl, discarding partial files")
def cancel(request, crawl_id: CrawlId):
    return acted(request, crawl_id, actions.cancel)


@action_route("retry", "Queue a failed or canceled crawl again, or only its failed pages")
def retry(request, crawl_id: CrawlId, failed_pages: bool = False):
    return acted(request, crawl_id, actions.retry_failed_pages if failed_pages else actions.retry)


@router.post("/crawls/{crawl_id}/scale", response={200: ActionOut, **ERRORS},
             summary="Run this many crawler instances (1 to 8)")
def scale(request, crawl_id: CrawlId, body: ScaleIn):
    return acted(request, crawl_id, actions.scale, body.scale)


def change_exclusion(request, crawl_id: str, change, regex: str) -> dict:
    need(request, "crawls.change_crawl")
    crawl = find_crawl(request, crawl_id)
    change(crawl, regex)  # ActionRefused → 409, or 422 for a regex that is not one
    # The whole regex is quoted back, where the CLI's sentence shortens a long one.
    verb = "no longer excludes" if change is actions.remove_exclusion else "excludes"
    return {"message": f"crawl {crawl.short_id} {verb} {regex!r}{actions.sent_live(crawl)}",
            "crawl": crawl_out(crawl)}


@router.post("/crawls/{crawl_id}/exclusions", response={200: ActionOut, **ERRORS},
             summary="Exclude URLs matching a regex (sent live to running instances)")
def add_exclusion(request, crawl_id: CrawlId, body: ExclusionIn):
    return change_exclusion(request, crawl_id, actions.add_exclusion, body.regex)


@router.delete("/crawls/{crawl_id}/exclusions", response={200: ActionOut, **ERRORS},
               summary="Remove an exclusion")
def remove_exclusion(request, crawl_id: CrawlId, regex: str = Query(..., max_length=MAX_REGEX_IN_URL)):
    return change_exclusion(request, crawl_id, actions.remove_exclusion, regex)


@router.delete("/crawls/{crawl_id}", response={200: Message, **ERRORS},
               summary="Delete a finished crawl, its files and its rows")
def delete(request, crawl_id: CrawlId):
    need(request, "crawls.delete_crawl")
    crawl = find_crawl(request, crawl_id)
    actions.delete(crawl)  # ActionRefused → 409, or 503 when storage does not answer
    return {"message": f"deleted crawl {crawl.short_id}"}

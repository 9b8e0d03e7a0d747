"""The API's response shapes (and the small request bodies that are not a crawl config)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, StrictStr

from crawls.models import CrawlStatus

StateFilter = Literal[tuple([*CrawlStatus.values, "active", "final"])]
# A row id: bounded so that no number reaches the database that it cannot store (SQLite and
# PostgreSQL integers are 64-bit; a larger one would be a 500, not a 404).
RowId = Annotated[int, Field(ge=1, le=2**63 - 1)]


class Out(BaseModel):
    """A response shape: plain pydantic, not ninja's Schema, whose validator wraps every value
    in a DjangoGetter (for ORM objects, which no route returns): that wrapping was half of a
    list page's time and its p99 (bench/api.py, issue 27)."""

    model_config = ConfigDict(from_attributes=True)


class Message(Out):
    message: str


class FileOut(Out):
    id: int
    crawl: str
    path: str
    size: int
    sha256: str
    created_at: dt.datetime
    signer: str = Field(description="Who signed it (wacz-auth): 'this archiver (key …)', 'domain …', "
                        "'an anonymous key (key …)', 'not signed'; '' until verified.")
    verified_at: dt.datetime | None
    verified: bool | None = Field(description="Every hash and the signature held when last verified "
                                  "(null: not verified yet).")
    verify_result: str
    download_url: str


class CheckOut(Out):
    what: str
    ok: bool | None
    said: str


class VerifyOut(Out):
    name: str
    ok: bool
    signed: bool
    signer: str
    public_key: str
    domain: str
    created: str
    checks: list[CheckOut]


class Limits(Out):
    page_limit: int | None = Field(description="The crawl's page limit capped by its org's maximum.")
    size_limit: int | None
    time_limit: int | None


class QualityReviewOut(Out):
    status: str = Field(description="queued, running, done, failed or skipped")
    error: str | None = Field(description="Why it failed or was skipped.")
    attempts: int
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    pages: int
    mean: float | None
    worst: float | None
    below_0_80: int
    failed_pages: int


class CrawlOut(Out):
    id: str
    org: str
    status: str
    intent: str | None = Field(description="An action requested that the runner has not carried out yet.")
    stop_reason: str | None
    waiting_reason: str | None
    error: str | None = Field(description="Why it failed, the cause first.")
    error_detail: str | None = Field(description="Where its error came from: the instance, its exit code.")
    seeds: list[str]
    tags: list[str]
    pages_found: int
    pages_done: int
    pages_failed: int
    size_bytes: int
    exec_seconds: float
    elapsed_seconds: float
    attempts: int
    scale: int
    config: dict[str, Any]
    config_override: dict[str, Any]
    limits: Limits
    files: list[FileOut]
    quality_review: QualityReviewOut | None = Field(
        None, description="Its quality review (--qa, `archiver qa`): status and scores; null if never asked for.")
    created_at: dt.datetime
    updated_at: dt.datetime
    started_at: dt.datetime | None
    progress_at: dt.datetime | None = Field(description="When the last page was done.")
    finished_at: dt.datetime | None


class RowError(Out):
    id: str
    code: str
    message: str


class CrawlPage(Out):
    items: list[CrawlOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last.")
    errors: list[RowError] = Field(default_factory=list, description=(
        "Rows of this page that could not be shown (their stored data is damaged): left out of "
        "`items`, named here with code `damaged_row`, and logged on the server."))


class ActionOut(Out):
    message: str = Field(description="The sentence the CLI prints for the same action.")
    crawl: CrawlOut


# Request bodies are strict, as CrawlConfig is: `true`, `"3"` or `3.0` for a whole number
# is refused (422), not read as something the client may not have meant.


class ScaleIn(Schema):
    scale: StrictInt


def bytes_or_size(value):
    """A JSON integer or a string such as "500GB": `true` and `5.0` are neither."""
    if isinstance(value, bool | float):
        raise ValueError('must be a whole number of bytes or a size such as "500GB"')
    return value


class ExclusionIn(Schema):
    regex: str = Field(max_length=10_000)


class PageOut(Out):
    id: int
    url: str
    depth: int
    seed: bool
    status: str
    http_status: int | None
    load_state: int | None
    title: str
    mime: str
    captured_at: dt.datetime | None
    filename: str
    error: str


class PagePage(Out):
    items: list[PageOut]
    next_cursor: str | None


class LogOut(Out):
    id: int
    created_at: dt.datetime
    level: str
    source: str
    message: str
    details: dict[str, Any]


class LogPage(Out):
    items: list[LogOut]
    next_cursor: str | None


class OrgOut(Out):
    slug: str
    name: str
    max_concurrent_crawls: int | None
    storage_quota_bytes: int | None
    exec_minutes_quota: int | None
    max_pages_per_crawl: int | None
    bytes_stored: int
    exec_minutes_this_month: float
    active_crawls: int


class OrgIn(Schema):
    """Only the fields given change; null clears a quota (unlimited). Sizes take units."""

    name: str | None = Field(default=None, max_length=200)
    max_concurrent_crawls: StrictInt | None = None
    storage_quota: Annotated[StrictInt | StrictStr | None, BeforeValidator(bytes_or_size)] = Field(
        default=None, description="bytes, or e.g. 500GB, 2TiB")
    exec_minutes: StrictInt | None = None
    max_pages: StrictInt | None = None


class OrgChanged(Out):
    message: str
    org: OrgOut


class LastCrawl(Out):
    id: str
    status: str


class ScheduleOut(Out):
    id: int
    cron: str
    org: str
    enabled: bool
    seeds: list[str]
    config: dict[str, Any]
    tags: list[str]
    watch: dict[str, Any] | None = Field(
        description='What change alerts (crawl.changed) watch: {"pages": true}, {"urls": [...]}, '
                    '{"selector": "..."}; null: none.')
    next_run: dt.datetime | None
    last_crawl: LastCrawl | None


class ScheduleChanged(Out):
    message: str
    schedule: ScheduleOut


class DeliveryCounts(Out):
    pending: int
    delivering: int
    succeeded: int
    failed: int
    total: int


class WebhookOut(Out):
    id: int
    url: str = Field(description="Without its query, which may hold a token.")
    events: list[str]
    org: str | None
    enabled: bool
    created_at: dt.datetime
    deliveries: DeliveryCounts


class WebhookIn(Schema):
    url: str = Field(max_length=2000)
    secret: str = Field(description="HMAC-SHA256 key; write-only, never shown again.")
    events: list[str] = Field(default_factory=list, description="event names; empty = every event")
    org: str | None = Field(default=None, description="only this org's crawls; null = every org")


class WebhookChanged(Out):
    message: str
    webhook: WebhookOut


class DeliveryOut(Out):
    id: int
    webhook: int
    event: str
    event_id: str
    crawl: str
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    retry_at: dt.datetime | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None


class DeliveryPage(Out):
    counts: DeliveryCounts
    items: list[DeliveryOut]
    next_cursor: str | None

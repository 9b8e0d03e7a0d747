"""The input rules for orgs, webhooks and schedules: one pydantic model each.

Crawls are validated by `crawls.config.CrawlConfig`; these models do the same for the
other things people create. The CLI validates through them now, and the admin forms and
any API are meant to call the same `parse()` so that what one refuses the others refuse
with the same words. `parse()` raises ConfigError with one readable line; nothing here
writes to the database or echoes a secret. The validators the model fields carry are in
crawls/fields.py, which imports no model (the models use them).

Choices that all callers share:
- Quotas are whole numbers from 1 up; None (empty) means unlimited and 0 is refused
  everywhere: it meant "nothing at all" to the runner for some quotas, "no limit" for
  the page limit, and "-" to `org list`. To stop an org's crawls, pause or cancel them.
- Field limits are the database columns' (a slug of 50 characters, a name of 200, a cron
  of 100, a webhook URL of 2000), so nothing is ever truncated on save.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
)

from archiver.errors import ConfigError, WebhookRefused
from crawls.config import CrawlConfig
from crawls.fields import QUOTA_LIMITS
from crawls.models import CrawlEvent
from crawls.rules import Tags, first_error, printable, shown
from crawls.schedules import check_cron
from crawls.webhooks import InvalidWebhook, clean_events, clean_secret

SLUG_LENGTH = 50  # Org.slug, a SlugField
NAME_LENGTH = 200  # Org.name
CRON_LENGTH = 100  # Schedule.cron
WEBHOOK_URL_LENGTH = 2000  # Webhook.url
SLUG = re.compile(r"[-a-zA-Z0-9_]+")


def check_slug(slug: str) -> str:
    if len(slug) > SLUG_LENGTH:
        raise ValueError(f"an org slug is at most {SLUG_LENGTH} characters (got {len(slug)})")
    if not SLUG.fullmatch(slug):
        raise ValueError(f"{shown(slug)} is not a slug (letters, digits, - and _)")
    return slug


def check_name(name: str) -> str:
    if len(name) > NAME_LENGTH:
        raise ValueError(f"a name is at most {NAME_LENGTH} characters (got {len(name)})")
    if not printable(name):
        raise ValueError("a name may not contain control characters")
    return name


Slug = Annotated[StrictStr, AfterValidator(check_slug)]
Quota = Annotated[int | None, Field(strict=True)]  # True is not 1, "5" is not 5


def parse(model: type[BaseModel], values: dict) -> BaseModel:
    """`model(**values)`, or ConfigError with the first problem as one line."""
    try:
        return model(**values)
    except ValidationError as exc:
        raise ConfigError(first_error(exc, model=model)) from None


class OrgInput(BaseModel):
    """An org, or the fields of one being changed (only the fields given are set).

    `OrgInput.parse(slug="acme", max_pages_per_crawl=1000)`; `.changes()` is then the
    dict of columns to write. Quotas: None = unlimited, else 1 up to QUOTA_LIMITS.
    """

    model_config = ConfigDict(extra="forbid")

    slug: Slug
    name: StrictStr | None = None
    max_concurrent_crawls: Quota = None
    storage_quota_bytes: Quota = None
    exec_minutes_quota: Quota = None
    max_pages_per_crawl: Quota = None

    @field_validator(*QUOTA_LIMITS)
    @classmethod
    def _quota(cls, value: int | None, info) -> int | None:
        high = QUOTA_LIMITS[info.field_name]
        if value is not None and not 1 <= value <= high:
            raise ValueError(f"must be from 1 to {high}, or empty for unlimited (0 is refused)")
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value)

    @classmethod
    def parse(cls, **values) -> OrgInput:
        return parse(cls, values)

    def changes(self) -> dict:
        """The given fields other than the slug, as Org columns (a None name is '')."""
        changes = self.model_dump(include=self.model_fields_set - {"slug"})
        if "name" in changes and changes["name"] is None:
            changes["name"] = ""
        return changes


class WebhookInput(BaseModel):
    """A webhook: a URL that passes the text-only SSRF rules, a write-only secret, known
    event names (empty = every event) and the slug of its org (finding it is the caller's
    job). Then `check_destination()` applies the address rules the runner applies at
    delivery; it resolves the host name, so callers run it last, once the rest is valid."""

    model_config = ConfigDict(extra="forbid")

    url: StrictStr = Field(max_length=WEBHOOK_URL_LENGTH)
    secret: StrictStr
    events: list[StrictStr] = Field(default_factory=list, max_length=20)
    org: Slug | None = None
    enabled: StrictBool = True

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        from crawls import ssrf

        try:
            ssrf.parse_webhook_url(value)
        except WebhookRefused as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        if not printable(value):
            raise ValueError("the webhook secret contains control characters")
        try:
            return clean_secret(value)
        except InvalidWebhook as exc:
            raise ValueError(str(exc)) from None

    @field_validator("events")
    @classmethod
    def _events(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name.strip() and name.strip() not in CrawlEvent.NAMES]
        if unknown:
            raise ValueError(
                f"unknown event {shown(unknown[0].strip())}; known events: {', '.join(CrawlEvent.NAMES)}"
            )
        return clean_events(value)

    @classmethod
    def parse(cls, **values) -> WebhookInput:
        return parse(cls, values)

    def check_destination(self) -> None:
        """ConfigError unless the runner would deliver to this URL (names host:port only)."""
        from crawls import ssrf

        try:
            ssrf.check_url(self.url)
        except (WebhookRefused, OSError) as exc:  # OSError: the name does not resolve
            raise ConfigError(f"refused: {exc}") from None


def check_cron_text(expression: str) -> str:
    if len(expression) > CRON_LENGTH:
        raise ValueError(f"a cron expression is at most {CRON_LENGTH} characters")
    if not printable(expression.replace("\t", " ")):
        raise ValueError("a cron expression may not contain control characters")
    try:
        return check_cron(expression)
    except (OverflowError, KeyError, IndexError, TypeError):
        # croniter raises more than its own errors on some inputs; all mean "not cron".
        raise ValueError(f"{shown(expression)} is not a valid cron expression") from None


class ScheduleInput(BaseModel):
    """A schedule: a cron expression (UTC), the crawl it queues and that crawl's tags."""

    model_config = ConfigDict(extra="forbid")

    org: Slug = "default"
    cron: Annotated[StrictStr, AfterValidator(check_cron_text)]
    config: CrawlConfig
    tags: Tags = Field(default_factory=list)
    enabled: StrictBool = True

    @classmethod
    def parse(cls, **values) -> ScheduleInput:
        return parse(cls, values)

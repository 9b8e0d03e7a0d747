"""The data rules of webhooks: which events a webhook may name, what a secret must be,
and how a URL is shown without the parts that may hold a token.

The address rules (https only, no private addresses...) are crawls.ssrf's, applied by the
`webhook` command and the admin before a row is written, and again at every delivery.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from archiver.errors import ArchiverError
from crawls.models import CrawlEvent

MAX_SECRET = 500


class InvalidWebhook(ArchiverError):
    """A webhook's events or secret are not acceptable; the message says which and why."""


def clean_events(names: Iterable[str]) -> list[str]:
    """Known event names, without repeats, in the order given; empty means every event."""
    events = list(dict.fromkeys(name.strip() for name in names if name.strip()))
    unknown = [name for name in events if name not in CrawlEvent.NAMES]
    if unknown:
        raise InvalidWebhook(
            f"unknown event {unknown[0]!r}; known events: {', '.join(CrawlEvent.NAMES)}"
        )
    return events


def clean_secret(secret: str | None) -> str:
    if secret is None or not secret.strip():
        raise InvalidWebhook("the webhook secret is empty; receivers verify signatures with it")
    if secret != secret.strip():
        raise InvalidWebhook("the webhook secret starts or ends with spaces")
    if len(secret) > MAX_SECRET:
        raise InvalidWebhook(f"the webhook secret is longer than {MAX_SECRET} characters")
    return secret


def shown_url(url: str) -> str:
    """The URL without its query (often a token): `https://host/path?…`."""
    parts = urlsplit(url)
    return parts._replace(query="…" if parts.query else "", fragment="").geturl()

"""`/web/<timestamp>/<url>`: the capture of a URL nearest a time, Wayback-style (issue 24).

A timestamp is 4 to 14 digits, `YYYYMMDDhhmmss` or a prefix of it (a missing month or day
is the first, a missing time midnight UTC); `*` asks for every capture. Captures are the
Snapshot rows of archived pages (a capture time and a kept archive).
"""

from __future__ import annotations

import datetime as dt
import re

from crawls.models import Snapshot, SnapshotStatus

PADDING = "00000101000000"  # YYYY0101000000: what a shorter timestamp stands for
MAX_LISTED = 1000


def parse_timestamp(text: str) -> dt.datetime:
    if not re.fullmatch(r"\d{4,14}", text):
        raise ValueError(f"{text[:20]!r} is not a timestamp (4 to 14 digits, YYYYMMDDhhmmss or a prefix)")
    try:
        return dt.datetime.strptime(text + PADDING[len(text):], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        raise ValueError(f"{text!r} is not a valid date and time") from None


def timestamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y%m%d%H%M%S")


def normal_url(raw: str, query: str = "") -> str:
    """The archived URL a /web/ path names: a proxy or a server may fold `//` into `/`."""
    url = re.sub(r"^(https?):/+", r"\1://", raw)
    return f"{url}?{query}" if query else url


def captures(crawls, url: str):
    """Archived captures of `url` among `crawls` (a Crawl queryset), oldest first."""
    rows = Snapshot.objects.filter(crawl__in=crawls, status=SnapshotStatus.DONE, captured_at__isnull=False)
    found = rows.filter(url=url)
    if not found.exists() and not url.endswith("/"):
        found = rows.filter(url=f"{url}/")  # `/web/.../https://example.com` means its home page
    return found.select_related("crawl").order_by("captured_at", "pk")


def nearest(crawls, url: str, when: dt.datetime) -> Snapshot | None:
    """The capture of `url` nearest `when`, before or after it (the earlier one on a tie)."""
    found = captures(crawls, url)
    before = found.filter(captured_at__lte=when).order_by("-captured_at", "-pk").first()
    after = found.filter(captured_at__gt=when).first()
    if before is None or after is None:
        return before or after
    return before if when - before.captured_at <= after.captured_at - when else after

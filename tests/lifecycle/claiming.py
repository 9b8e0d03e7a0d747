"""The lifecycle tests' pinned time, and a crawl claimed the way a runner claims it."""

from __future__ import annotations

import datetime as dt

from crawls.models import Crawl

NOW = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)


def claim(crawl: Crawl, now: dt.datetime = NOW, owner: str = "runner-a") -> int:
    """Claim `crawl` the way a runner does (made due at `now`); returns the lease token."""
    Crawl.objects.filter(pk=crawl.pk).update(retry_at=now)
    (won,) = Crawl.objects.filter(pk=crawl.pk).claim(owner, now, lease_seconds=30)
    crawl.refresh_from_db()
    return won.token

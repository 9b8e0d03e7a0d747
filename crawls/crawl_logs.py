"""Each crawl's log: the runner's notes and its crawlers' log lines, the newest N MB kept.

The runner hands the lines it read from a crawler to `keep_lines()`; they are hostile
input (a crawler may send anything), so every field is bounded and typed here before it
is stored. Each line counts its size in the crawl's `log_bytes`; once that exceeds the
budget (ARCHIVER_CRAWL_LOG_MB), the oldest lines are deleted, so a chatty or hostile
crawler costs at most the budget. `archiver logs ID [--follow]` and the admin read them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable

from django.db import transaction

from archiver import conf
from crawls.models import Crawl, CrawlLog

MAX_MESSAGE = 8_000  # characters of one line's message
MAX_DETAILS = 4_000  # bytes of one line's details, as JSON
LEVELS = {"debug", "info", "warn", "warning", "error", "fatal"}
SOURCE_WIDTH = 32  # CrawlLog.source's max_length
INSTANCE_SUFFIX = re.compile(r"-\d{1,5}$")  # the -<i> of an instance's name, crawl-<id>-<i>
TRIM_BATCH = 1_000  # oldest lines examined per deletion query


def budget_bytes(settings: conf.Settings | None = None) -> int:
    return int((settings or conf.get()).crawl_log_mb * 1_000_000)


def line_from(entry: dict, now: dt.datetime, source: str) -> CrawlLog:
    """A CrawlLog row from one crawler log entry (browsertrix's JSON line shape)."""
    level = str(entry.get("logLevel", "info")).lower()[:16]
    message = str(entry.get("message", ""))[:MAX_MESSAGE]
    details = entry.get("details")
    if not isinstance(details, dict) or len(json.dumps(details, default=str)) > MAX_DETAILS:
        details = {}
    context = fit_source(str(entry.get("context") or source))
    line = CrawlLog(created_at=now, level=level if level in LEVELS else "info", source=context,
                    message=message, details=json.loads(json.dumps(details, default=str)))
    line.size = len(message.encode()) + len(json.dumps(line.details)) + 64  # + row overhead
    return line


def fit_source(name: str) -> str:
    """`name` cut to the source column from its end, so it still starts as it did: an
    instance's `crawl-<id>-<i>` keeps its `-<i>` after the cut (`crawl-<start of id>…-<i>`),
    never reading like another crawl's id."""
    if len(name) <= SOURCE_WIDTH:
        return name
    match = INSTANCE_SUFFIX.search(name)
    suffix = match.group() if match else ""
    return name[:SOURCE_WIDTH - 1 - len(suffix)] + "…" + suffix


def keep_lines(crawl: Crawl, entries: Iterable[dict], now: dt.datetime, *, source: str = "crawler",
               budget: int | None = None) -> int:
    """Store a crawler's log entries for `crawl`, then trim its log to the budget.

    Returns how many lines were stored. Safe to call with untrusted entries: non-dict
    entries are skipped, fields are cut to their limits.
    """
    lines = [line_from(entry, now, source) for entry in entries if isinstance(entry, dict)]
    if not lines:
        return 0
    for line in lines:
        line.crawl_id = crawl.pk
    added = sum(line.size for line in lines)
    with transaction.atomic():
        CrawlLog.objects.bulk_create(lines, batch_size=500)
        Crawl.objects.filter(pk=crawl.pk).add_log_bytes(added)
    trim(crawl, budget if budget is not None else budget_bytes())
    return len(lines)


def trim(crawl: Crawl, budget: int) -> int:
    """Delete the crawl's oldest lines until its log fits `budget`; returns bytes freed."""
    freed = 0
    while True:
        kept = Crawl.objects.filter(pk=crawl.pk).values_list("log_bytes", flat=True).first() or 0
        excess = kept - budget
        if excess <= 0:
            return freed
        oldest = list(CrawlLog.objects.filter(crawl_id=crawl.pk).order_by("id")
                      .values_list("id", "size")[:TRIM_BATCH])
        if not oldest:
            Crawl.objects.filter(pk=crawl.pk).clear_log_bytes()
            return freed
        cut, size = oldest_to_drop(oldest, excess)
        with transaction.atomic():
            CrawlLog.objects.filter(crawl_id=crawl.pk, id__lte=cut).delete()
            Crawl.objects.filter(pk=crawl.pk).add_log_bytes(-size)
        freed += size


def oldest_to_drop(oldest: list[tuple[int, int]], excess: int) -> tuple[int, int]:
    """The last id to delete (oldest first) to free `excess` bytes, and the bytes it frees."""
    freed = 0
    for line_id, size in oldest:
        freed += size
        if freed >= excess:
            return line_id, freed
    return oldest[-1][0], freed

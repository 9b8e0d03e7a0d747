"""Page ingestion: what a crawl's crawlers reported in Redis, stored in its rows.

Page records (`:pages`) and failed pages (`:f`) become Snapshot rows, one per URL; error
lines (`:e`) become CrawlLog lines; the counters the crawl shows are saved with our lease
token. Supervision ingests what one read found (runner/apply.py); a session that ends and a
crawl that ends have everything still in Redis read here first.
"""

from __future__ import annotations

import contextlib
import datetime as dt

import redis

from archiver.errors import ArchiverError
from crawls import crawl_logs
from crawls.models import Crawl, Snapshot, SnapshotStatus, page_loaded
from runner.observe import failed_offset, files_bytes, progress_values
from runner.progress import Progress
from runner.state import Runtime

MAX_DRAIN_BATCHES = 20  # per crawl per tick, so one busy crawl cannot starve the others
READ_REST_BATCHES = 10_000  # when a session ends: everything it reported


def ingest_read(rt: Runtime, crawl: Crawl, progress: Progress, now: dt.datetime) -> int:
    """What this tick's read found, then up to MAX_DRAIN_BATCHES more batches when there was
    more; the entries of `<id>:f` stored as failed so far (where the next read goes on)."""
    ingest(crawl, progress.pages, progress.errors, now, progress.failed_pages)
    rt.store.let_go(crawl.redis_db, crawl.pk, progress.pages_taken)
    more, batches = progress.more, 0
    while more and batches < MAX_DRAIN_BATCHES:
        more, batches = drain_once(rt, crawl, now), batches + 1
    return progress.failed


def drain_once(rt: Runtime, crawl: Crawl, now: dt.datetime) -> bool:
    """One batch of page records and error lines stored, then let go; whether there was any."""
    pages, errors, taken = rt.store.drain(crawl.redis_db, crawl.pk)
    ingest(crawl, pages, errors, now)
    rt.store.let_go(crawl.redis_db, crawl.pk, taken)
    return bool(taken or errors)


def drain_rest(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Every page record and error line still in Redis (before a session's pages are named)."""
    for _ in range(READ_REST_BATCHES):
        if not drain_once(rt, crawl, now):
            return


def drain_held(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """drain_rest() for a crawl we hold whose Redis answers, so the pages a kept archive
    holds exist before they are named after it. Only ours: at start-up a crawl's Redis
    database may be another runner's. Redis failing here is seen by the next read."""
    held = rt.held.get(crawl.pk)
    if held is not None and crawl.redis_db is not None and not held.redis_down_since:
        with contextlib.suppress(redis.RedisError, ArchiverError):
            drain_rest(rt, crawl, now)


def read_rest(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """The last counters, pages, failed pages and error lines the crawlers wrote."""
    held = rt.held[crawl.pk]
    for _ in range(READ_REST_BATCHES):
        progress = rt.store.read(crawl.redis_db, crawl.pk, failed_offset=failed_offset(crawl, held))
        ingest(crawl, progress.pages, progress.errors, now, progress.failed_pages)
        rt.store.let_go(crawl.redis_db, crawl.pk, progress.pages_taken)
        held.failed_read = progress.failed
        values = progress_values(crawl, progress, files_bytes(crawl))
        changed = {k: v for k, v in values.items() if getattr(crawl, k) != v}
        if changed:
            rt.save(crawl, now, **changed)
        if not progress.more:
            return


def ingest(crawl: Crawl, pages: list[dict], errors: list[dict], now: dt.datetime,
           failed: list[dict] = ()) -> None:
    """Pages become Snapshots, one per URL, by the real crawler's rules (docs/crawlers.md):

    - a failed page (`:f`) is failed, with its reason;
    - a loaded page record (`:pages`, page_loaded()) is done and replaces an earlier report,
      so a retried page that now succeeds is done;
    - a page record that did not load is failed too, but replaces nothing: the crawler also
      put that page on `:f`, before or after, and that record says why. Its load state is kept.

    Error lines become CrawlLog lines. The filename is not the crawler's: it is set once the
    session's WACZ is kept (name_pages)."""
    if not (pages or failed or errors):
        return  # the usual tick: nothing new, no query
    loaded, unloaded = {}, {}
    for page in pages:
        if page.get("url") and page_loaded(page):
            loaded[page["url"]] = snapshot_from(crawl, page, now)
        elif page.get("url"):
            unloaded[page["url"]] = snapshot_from(crawl, page, now, SnapshotStatus.FAILED)
    failures = {page["url"]: snapshot_from(crawl, page, now, SnapshotStatus.FAILED)
                for page in failed if page.get("url") and page["url"] not in loaded}
    # A failed-pages session crawls its pages as seeds (depth 0): they keep the depth they had.
    depth = [] if crawl.config_override else ["depth"]
    upsert(list(loaded.values()), ["status", "http_status", "load_state", "title", "mime",
                                   "captured_at", "error", *depth])
    upsert(list(failures.values()), ["status", "error", *depth])
    new = [row for url, row in unloaded.items() if url not in loaded and url not in failures]
    known = set(Snapshot.objects.filter(crawl=crawl, url__in=[row.url for row in new]).exclude(
        status=SnapshotStatus.QUEUED).values_list("url", flat=True)) if new else set()
    upsert([row for row in new if row.url not in known], ["status", "load_state", "error", *depth])
    for url, row in unloaded.items():  # failed pages are few: one update each
        if url not in loaded and row.load_state is not None:
            Snapshot.objects.filter(crawl=crawl, url=url, status=SnapshotStatus.FAILED).update(
                load_state=row.load_state)
    if errors:
        # Bounded per crawl (ARCHIVER_CRAWL_LOG_MB): a chatty crawler costs at most that.
        crawl_logs.keep_lines(crawl, ({"logLevel": "error", **e} for e in errors), now)


def upsert(snapshots: list[Snapshot], fields: list[str]) -> None:
    """Insert these Snapshots; a URL the crawl has already gets only `fields` changed."""
    if snapshots:
        Snapshot.objects.bulk_create(snapshots, batch_size=500, update_conflicts=True,
                                     unique_fields=["crawl", "url"], update_fields=fields)


def snapshot_from(crawl: Crawl, page: dict, now: dt.datetime,
                  status: str = SnapshotStatus.DONE) -> Snapshot:
    http_status, load_state = page.get("status"), page.get("loadState")
    captured = None
    if page.get("ts"):
        with contextlib.suppress(ValueError, TypeError):
            captured = dt.datetime.fromisoformat(str(page["ts"]).replace("Z", "+00:00"))
    error = str(page.get("reason") or "")[:2000]
    if status == SnapshotStatus.FAILED and not error:
        error = "the page did not load" + (f" (load state {load_state})" if type(load_state) is int else "")
    return Snapshot(
        crawl_id=crawl.pk, url=str(page["url"]), depth=_int(page.get("depth")),
        seed=bool(page.get("seed")), status=status, error=error,
        http_status=http_status if type(http_status) is int and 0 <= http_status < 1000 else None,
        load_state=load_state if type(load_state) is int and 0 <= load_state < 100 else None,
        title=str(page.get("title") or "")[:2000], mime=str(page.get("mime") or "")[:200],
        captured_at=captured, created_at=now,
    )


def _int(value) -> int:
    """A crawler's number, or 0: a hostile page record must not stop ingestion."""
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0

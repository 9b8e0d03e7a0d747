"""Keeping a session's archive, whatever the storage, and naming the pages it holds.

After every instance exit (and when a crawl ends or is handed over) what its crawlers
archived is kept once (docs/architecture.md, "Why instances have their own folders"):

- under the data dir, the session's WACZ is moved into archives/<crawl>/ through the file
  boundary of runner/archive.py;
- with a bucket (ARCHIVER_STORAGE_URL), the crawler uploaded it itself, and its report is
  recorded through the bucket contract of runner/uploads.py.

Either way the WARCs the kept WACZ holds are forgotten in the instance's folder, the pages
its page lists name get its name (Snapshot.filename) after what the crawlers reported is
read (runner/ingest.py), and the session's counters are recorded. When the crawl ends, what
its crawlers left unpackaged is kept too (keep_leftovers), never deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator

import redis

from archiver.errors import ArchiverError
from crawls import provenance, storage
from crawls.models import PAGE_LOADED, Crawl, CrawlFile, Process, Snapshot, SnapshotStatus
from runner import archive, uploads, wacz_members
from runner.ingest import drain_held
from runner.observe import files_bytes
from runner.state import Runtime

log = logging.getLogger("runner.daemon")


# --- a session ------------------------------------------------------------------------------


def keep_session(rt: Runtime, crawl: Crawl, process: Process, now: dt.datetime) -> None:
    """Keep what an ended instance archived, and forget it in its folder; its warnings in
    the crawl's log. The pages its WACZ holds are named after the kept file (with object
    storage: the recorded object whose SHA-256 the session's WACZ has, read before that WACZ
    is deleted). Then the session's counters (count_session) and what it left in archive/."""
    if rt.settings.s3 is not None:
        path, removed = keep_uploaded_session(rt, crawl, process, now)
    else:
        path, removed = keep_local_session(rt, crawl, process, now)
    count_session(crawl, process, path)
    for warning in removed.warnings if removed else ():
        rt.note(crawl, warning, "warning", now)
    if removed is not None and crawl.redis_db is not None:
        try:
            rt.store.set_size(crawl.redis_db, crawl.pk, process.hostname, removed.left_bytes)
        except (redis.RedisError, ArchiverError) as exc:
            log.warning("crawl %s: could not reset the size of %s (%s)", crawl.short_id,
                        process.hostname, type(exc).__name__)


def keep_local_session(rt: Runtime, crawl: Crawl, process: Process, now: dt.datetime,
                       ) -> tuple[str | None, archive.Removed | None]:
    """The session's WACZ moved into archives/<crawl>/ and recorded: the kept file's path
    (None when there was none) and what was forgotten in the instance's folder."""
    limits = archive.Limits.of(rt.settings)
    kept, removed = archive.collect_session(rt.settings.data_dir, crawl, process, now, limits)
    record_kept(rt, crawl, kept, now)
    if not kept.files:
        return None, removed
    drain_held(rt, crawl, now)  # what the session reported, so its pages exist
    name_pages(rt, crawl, kept.files[0], now)
    return kept.files[0].path, removed


def keep_uploaded_session(rt: Runtime, crawl: Crawl, process: Process, now: dt.datetime,
                          ) -> tuple[str | None, archive.Removed | None]:
    """What the instance uploaded, recorded from its reports; the session's WACZ, once the
    bucket holds it, names its pages and is forgotten in the folder: the recorded object's
    key (None when the bucket has none of it) and what was forgotten."""
    session: list[str] = []

    def named(path: str, entries: Iterator[dict]) -> None:
        session.append(path)
        drain_held(rt, crawl, now)  # what the session reported, so its pages exist
        name_listed(rt, crawl, path, entries, now)

    kept, removed = uploads.keep_uploaded(rt, crawl, process, now, named)
    record_kept(rt, crawl, kept, now)
    return (session[-1] if session else None), removed


def count_session(crawl: Crawl, process: Process, path: str | None) -> None:
    """Process.pages_done and size_bytes (docs/runner.md, "What a session counts"): the done
    pages named after the file kept for the session, and that file's bytes. A session ending
    now that kept none (canceled, crashed) counts what the crawl's pages done grew by while it
    ran, when no other instance ran beside it (else they cannot be told apart: 0)."""
    if path is not None:
        size = crawl.files.filter(path=path).values_list("size", flat=True).first() or 0
        pages = crawl.snapshots.filter(filename=path.rsplit("/", 1)[-1], status=SnapshotStatus.DONE)
        process.record_counts(pages.count(), size)
    elif process.is_live and process.done_at_start is not None and process.ran_alone():
        process.record_counts(max(0, crawl.pages_done - process.done_at_start), 0)


def name_pages(rt: Runtime, crawl: Crawl, kept: CrawlFile, now: dt.datetime) -> None:
    """Snapshot.filename = the kept WACZ's name, for the pages its page lists hold. The
    crawler's own `filename` names its upload (`<timestamp>-<id>.wacz`) or a WARC, never a
    file archiver keeps."""
    limits = archive.Limits.of(rt.settings, rt.stop_event)
    name_listed(rt, crawl, kept.path, archive.kept_pages(rt.settings.data_dir, kept, limits), now)


def name_listed(rt: Runtime, crawl: Crawl, path: str, entries: Iterator[dict],
                now: dt.datetime) -> None:
    """Snapshot.filename = the last part of `path` (a kept file, or an object's key) for the
    pages `entries` (a WACZ's page lists) name. Only pages that have rows are named: the
    caller reads what the crawlers reported first (ingest.drain_held)."""
    name, urls = path.rsplit("/", 1)[-1], []
    try:
        for page in entries:
            state = page.get("loadState")
            if isinstance(page.get("url"), str) and not (type(state) is int and state < PAGE_LOADED):
                urls.append(page["url"])
            if len(urls) >= 500:
                set_filename(crawl, urls, name)
                urls = []
    except (archive.Refused, OSError) as exc:
        # Over a limit or unreadable: no page is named after it, not even those read already.
        rt.note(crawl, f"cannot read the pages list of {path}: {exc}; no page is named "
                       "after it", "warning", now)
        Snapshot.objects.filter(crawl=crawl, filename=name).update(filename="")
        return
    set_filename(crawl, urls, name)


def set_filename(crawl: Crawl, urls: list[str], name: str) -> None:
    if urls:
        Snapshot.objects.filter(crawl=crawl, url__in=urls).exclude(
            status=SnapshotStatus.FAILED).update(filename=name)


def record_kept(rt: Runtime, crawl: Crawl, kept: archive.Kept, now: dt.datetime) -> None:
    """What a keep call recorded: its warnings said, our data dir named as the files' holder,
    the bytes we remember for the crawl grown."""
    for warning in kept.warnings:
        rt.note(crawl, warning, "warning", now)
    if kept.files:
        CrawlFile.objects.filter(pk__in=[f.pk for f in kept.files], root="").update(
            root=str(rt.settings.data_dir))
        # Archives on this host are verified once, as they are kept (those in a bucket on
        # request: reading them back here would double the upload's traffic).
        provenance.verify_kept([f for f in kept.files if f.verified_at is None and not storage.is_object(f)],
                               rt.settings, now)
    if kept.added_bytes:
        rt.event(f"crawl {crawl.short_id}: kept {kept.added_bytes} bytes")
        held = rt.held.get(crawl.pk)
        if held and held.files_bytes is not None:
            held.files_bytes += kept.added_bytes


# --- the crawl's end ------------------------------------------------------------------------


def keep_leftovers(rt: Runtime, crawl: Crawl, now: dt.datetime) -> int:
    """WARCs the crawl's instances left unpackaged are kept and recorded (never deleted), and
    with object storage so are uploads nobody reported; returns how many files could not be
    kept."""
    latest = {}
    for process in crawl.processes.order_by("created_at", "pk"):
        latest[process.instance] = process
    left_behind, added = 0, 0
    if rt.settings.s3 is not None:  # the last reports, before the Redis database is flushed
        reported = record_reported(rt, crawl, now)
        added += reported.added_bytes
        for process in latest.values() if reported.files else ():
            # Uploads recorded only now (the bucket was away at their exits): what they hold
            # is forgotten in the folders, or their WARCs would be kept a second time below.
            keep_uploaded_session(rt, crawl, process, now)
    for process in latest.values():
        kept = keep_instance_leftovers(rt, crawl, process, now)
        left_behind += kept.left_behind
        added += kept.added_bytes
    if rt.settings.s3 is not None:
        for warning in uploads.push_kept(rt, crawl, now):
            rt.note(crawl, warning, "warning", now)
        added += record_unreported(rt, crawl, now)
    if added:
        # The token as read (supervision checked it is ours; recovery reads crawls it does
        # not hold): a crawl retried or taken since then is left alone.
        crawl.record_kept_bytes(files_bytes(crawl), crawl.lease_token)
    return left_behind


def keep_instance_leftovers(rt: Runtime, crawl: Crawl, process: Process,
                            now: dt.datetime) -> archive.Kept:
    """The WARCs one instance left in its archive/ that no WACZ holds, moved into
    archives/<crawl>/ as they are and recorded."""
    kept = archive.move_leftovers(rt.settings.data_dir, crawl, process, now,
                                  archive.Limits.of(rt.settings))
    record_kept(rt, crawl, kept, now)
    return kept


def record_reported(rt: Runtime, crawl: Crawl, now: dt.datetime) -> archive.Kept:
    """The uploads the crawl's crawlers reported, recorded (with object storage)."""
    kept = uploads.record_reports(rt, crawl, now)
    record_kept(rt, crawl, kept, now)
    return kept


def record_unreported(rt: Runtime, crawl: Crawl, now: dt.datetime) -> int:
    """Uploads in the crawl's prefix that no report named, recorded and their pages named
    (one LIST when there are none); the bytes added. The store away: said, and left."""
    objects, limits = storage.object_store(rt.settings), archive.Limits.of(rt.settings)
    try:
        kept = uploads.record_unreported(rt, crawl, now)
    except storage.StorageError as exc:
        rt.note(crawl, f"uploads nobody reported were not looked for: {exc}", "warning", now)
        return 0
    record_kept(rt, crawl, kept, now)
    if kept.files:
        drain_held(rt, crawl, now)  # what the crawlers reported, so the pages exist
    try:
        for row in kept.files:
            with objects.open(row.path, row.size) as handle:
                name_listed(rt, crawl, row.path, wacz_members.page_entries(handle, row.size, limits), now)
    except storage.StorageError as exc:
        rt.note(crawl, f"the pages of an upload nobody reported are not named: {exc}", "warning", now)
    return kept.added_bytes

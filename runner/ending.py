"""Ending a held crawl: finished, failed, paused, or ended before it ran; and what goes with
it (the last progress read, instances removed, files kept, Redis flushed then released).

Nothing a crawl archived is deleted here unless the crawl was canceled. Supervision ends a
crawl through runner/apply.py (Finish, CancelTimeout) or its error boundary (fail); the claim
step ends paused crawls and crawls asked to stop before they ran.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import logging
import shutil

import redis

from archiver.errors import LaunchError
from crawls import quotas, storage
from crawls.models import (
    STOPPED_STATE,
    Crawl,
    CrawlStatus,
    ExitReason,
    Intent,
    SnapshotStatus,
    StopReason,
)
from runner import archive, qa_queue
from runner.crawler_log import cause, crawler_words
from runner.decide import ALL_FAILED, Outcome
from runner.ingest import drain_rest, read_rest
from runner.keep import keep_leftovers, keep_session
from runner.observe import files_bytes
from runner.state import Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus


def finish(rt: Runtime, crawl: Crawl, outcome: Outcome, now: dt.datetime, read_last: bool = True) -> None:
    """End the crawl with `outcome`; `read_last` False for one whose Redis keys were dropped
    (their counters would read as zeros)."""
    held = rt.held[crawl.pk]
    if outcome.status == S.PAUSED:
        return pause(rt, crawl, now)
    db = crawl.redis_db
    with contextlib.suppress(redis.RedisError):
        if read_last:
            read_rest(rt, crawl, now)
    remove_instances(rt, crawl, now)
    quotas.count_crawl_time(crawl, now)
    if crawl.config_override:
        settle_retried_pages(rt, crawl, now)
    if outcome.status == S.CANCELED:
        delete_files(rt, crawl)
        if crawl.size_bytes:
            rt.save(crawl, now, size_bytes=0)  # it keeps nothing
    elif kept := files_bytes(crawl):
        rt.save(crawl, now, size_bytes=kept)
    detail = ""
    if outcome.status == S.FAILED and outcome.error == ALL_FAILED:
        outcome, detail = explained(crawl, outcome)
    if not crawl.finish(outcome.status, held.token, now, stop_reason=outcome.stop_reason,
                        error=outcome.error, error_detail=detail):
        rt.hands_off(crawl.pk, "finishing it was refused")
        return
    rt.held.pop(crawl.pk, None)
    clean_up(rt, crawl, db)
    rt.event(f"crawl {crawl.short_id}: {outcome.status} pages={crawl.pages_done}/{crawl.pages_found}"
             + (f" ({outcome.error})" if outcome.error else ""))


def explained(crawl: Crawl, outcome: Outcome) -> tuple[Outcome, str]:
    """"every crawler instance failed", cause first in the crawler's own words
    (docs/crawlers.md), and the detail: each instance's last exit code."""
    words = crawler_words(crawl)
    exits = dict(crawl.processes.exclude(exit_code=None).order_by("pk").values_list("hostname", "exit_code"))
    codes = set(exits.values())
    context = "every instance failed" + (f", exit {codes.pop()}" if len(codes) == 1 else "")
    error = f"{cause(words)} ({context})" if words else ALL_FAILED
    none_archived = crawl.processes.filter(exit_reason=ExitReason.NO_PAGE).exists()
    detail = (ALL_FAILED + (" (no page succeeded)" if none_archived else "")
              + "".join(f"; {name} exit {code}" for name, code in exits.items())
              + (f": {words[:1000]}" if words else ""))
    return dataclasses.replace(outcome, error=error), detail


def pause(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Every instance was interrupted on our pause: the crawl waits, its queue kept in Redis."""
    held = rt.held[crawl.pk]
    remove_instances(rt, crawl, now)
    quotas.count_crawl_time(crawl, now)
    record_size(rt, crawl, now)
    reason = held.pause_reason or (crawl.waiting_reason
                                   if crawl.waiting_reason.startswith("paused: disk") else "")
    if crawl.mark_paused(held.token, now, reason):
        rt.event(f"crawl {crawl.short_id}: paused" + (f" ({reason})" if reason else ""))
        slot_freed(rt, crawl)
    rt.held.pop(crawl.pk, None)


def fail(rt: Runtime, crawl: Crawl, token: int, error: str, now: dt.datetime,
         stop_reason: str = "", detail: str = "") -> None:
    """End a crawl as failed with `error` (and its `detail`), whatever its instances are
    doing. What it archived is kept: sessions packaged or not are recorded before its
    folder goes."""
    db = crawl.redis_db
    with contextlib.suppress(redis.RedisError):
        if db is not None:
            drain_rest(rt, crawl, now)
    with contextlib.suppress(LaunchError):
        remove_instances(rt, crawl, now)
    if crawl.config_override:
        settle_retried_pages(rt, crawl, now)
    if crawl.finish(S.FAILED, token, now, stop_reason=stop_reason or crawl.stop_reason, error=error[:2000],
                    error_detail=detail[:2000]):
        rt.note(crawl, f"failed: {error}" + (f" ({detail})" if detail else ""), "error", now)
        if kept := files_bytes(crawl):
            crawl.record_kept_bytes(kept, token)
        clean_up(rt, crawl, db)
    rt.held.pop(crawl.pk, None)


def end_paused(rt: Runtime, crawl: Crawl, token: int, now: dt.datetime) -> bool:
    """A paused crawl we claimed: stopped or canceled on request, or paused too long."""
    db = crawl.redis_db
    if crawl.intent in (Intent.STOP, Intent.CANCEL):
        end_without_running(rt, crawl, token, now)
    elif crawl.pause_expired(now, rt.settings.pause_limit):
        if crawl.finish(S.STOPPED_PAUSE_LIMIT, token, now, stop_reason=StopReason.PAUSE_LIMIT):
            clean_up(rt, crawl, db)
            rt.event(f"crawl {crawl.short_id}: stopped, paused longer than allowed")
    else:
        Crawl.objects.release(crawl.pk, token, crawl.paused_at + dt.timedelta(
            seconds=rt.settings.pause_limit))
    rt.held.pop(crawl.pk, None)
    return True


def end_without_running(rt: Runtime, crawl: Crawl, token: int, now: dt.datetime) -> bool:
    """A crawl asked to stop or cancel before (re)starting ends with what it has."""
    db = crawl.redis_db
    if crawl.intent == Intent.CANCEL or not crawl.files.exists():
        delete_files(rt, crawl)
        if crawl.size_bytes:
            crawl.record_progress(token, now, size_bytes=0)  # it keeps nothing
        status, reason = S.CANCELED, StopReason.USER
    else:
        status, reason = STOPPED_STATE[StopReason.USER], StopReason.USER
    if crawl.finish(status, token, now, stop_reason=reason):
        clean_up(rt, crawl, db)
        rt.event(f"crawl {crawl.short_id}: {status}")
    return False


def settle_retried_pages(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """The end of a failed-pages session: a page it did not report stays failed."""
    crawl.snapshots.filter(status=SnapshotStatus.QUEUED).update(
        status=SnapshotStatus.FAILED, error="not archived by the failed-pages session")
    rt.save(crawl, now, pages_failed=crawl.failed_pages().count(),
            pages_done=crawl.snapshots.filter(status=SnapshotStatus.DONE).count())


def record_size(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """size_bytes once no instance runs: kept files plus what is left in progress."""
    with contextlib.suppress(redis.RedisError):
        size = files_bytes(crawl) + rt.store.size(crawl.redis_db, crawl.pk)
        if size != crawl.size_bytes:
            rt.save(crawl, now, size_bytes=size)


def remove_instances(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Stop and remove every live instance, keeping what each had packaged."""
    for process in crawl.processes.live():
        if process.started_at is not None:
            rt.launcher.remove(rt.launcher.ref_of(process))
            keep_session(rt, crawl, process, now)
        process.mark_removed(now)


def clean_up(rt: Runtime, crawl: Crawl, db: int | None = None) -> None:
    """After the crawl is final: what its crawlers left unpackaged is kept, its working
    folder goes, its Redis database is flushed and only then released."""
    left_behind = 0 if crawl.status == S.CANCELED else keep_leftovers(rt, crawl, rt.clock())
    if not left_behind:  # a file we could not keep stays where it is, for a person to look at
        shutil.rmtree(rt.settings.crawls_dir / crawl.pk, ignore_errors=True)
    db = crawl.redis_db if db is None else db
    if db is not None:
        release_redis(rt, crawl, db)
    if not left_behind:
        qa_queue.make_due(crawl, rt.clock())  # its files are all recorded: --qa may replay them
    slot_freed(rt, crawl)


def release_redis(rt: Runtime, crawl: Crawl, db: int) -> bool:
    """Flush the crawl's Redis database, then give it back: never the other way round."""
    try:
        rt.store.revoke(crawl.pk)
        rt.store.flush(db)
        rt.store.forget(db)
        # Its client (a redis-py client is a reference cycle) goes now, not at the next full
        # collection: with start-up frozen (runner/service.py) this walks only what the
        # crawls made. Without it the daemon grew ~40 kB per finished crawl (issue 27).
        gc.collect()
    except redis.RedisError as exc:
        log.warning("crawl %s: could not flush Redis db %s (%s); trying again later",
                    crawl.short_id, db, type(exc).__name__)
        return False
    return crawl.release_redis_db(db)


def delete_files(rt: Runtime, crawl: Crawl) -> None:
    """A canceled crawl keeps nothing (the only deletion a runner makes on its own)."""
    removed = archive.delete_files(rt.settings.data_dir, crawl, storage.object_store(rt.settings))
    for warning in removed.warnings:
        rt.note(crawl, warning, "warning")


def slot_freed(rt: Runtime, crawl: Crawl) -> None:
    """A crawl of this org stopped running: its oldest waiting crawl may start now, not
    after the org retry delay (unleased ones only; the claim keeps the age order)."""
    if crawl.org.max_concurrent_crawls is not None:
        Crawl.objects.wake_waiting_for_org(crawl.org_id, rt.clock())



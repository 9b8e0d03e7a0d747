"""Handing over a crawl adopted from a dead home, before anything is relaunched here.

Its instances ran with a runner that is gone (docs/scaling.md, "When a runner or a host
dies"). Either only that daemon died, and they still crawl; or the host went with them, and
what they archived since their last upload went too, while Redis counts those pages done.
So, once per adoption:

1. every instance whose status in Redis is not final is asked to stop (`:stopone`), and we
   wait for them to be final, at most DEAD_AFTER_LEASES leases: a live orphan finishes its
   page, uploads, reports and exits, and never crawls beside the namesake we launch;
2. then what they reported is recorded, and so is every object under the crawl's prefix
   that no row records (an upload whose host died before its report, checked as a report
   is; one that fails the checks is said and left alone), the page lists of the crawl's
   archives in the bucket name the pages they hold (Snapshot.filename), every page that is
   done and in no recorded archive goes back into the queue (`ZADD :q` and `DECRBY :d` in
   one Redis transaction), and the old instances' `:status` and `:stopone` fields are
   forgotten.

What is lost with the host is thus crawled again, and what a live orphan archived is not.
Left: an orphan that stays silent past the wait (a partition, not a death) and uploads
later has its pages crawled twice (its upload is recorded at the crawl's end). A page record the dead runner had read but
not stored is still in `:pages` (records are let go only once stored), so it is stored here.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import redis

from archiver.errors import ArchiverError
from crawls import storage
from crawls.models import Crawl, Snapshot, SnapshotStatus
from runner import archive, uploads, wacz_members
from runner.ingest import drain_rest
from runner.keep import name_listed, record_kept, record_reported
from runner.state import Held, Runtime

log = logging.getLogger("runner.daemon")
EXITED = ("done", "interrupted", "failed", "canceled")
WAITING = "adopted: waiting for its old crawlers to stop and upload"
BATCH = 500


def begin(held: Held, now: dt.datetime, lease_seconds: float, leases: int) -> None:
    held.handover_until = now + dt.timedelta(seconds=leases * lease_seconds)


def pending(rt: Runtime, crawl: Crawl, held: Held, now: dt.datetime) -> bool:
    """True while the handover waits (nothing else happens to the crawl this tick); False
    once it is done. Redis or the bucket away: it waits for them."""
    if crawl.redis_db is None:
        held.handover_until = None
        return False
    try:
        statuses = rt.store.statuses(crawl.redis_db, crawl.pk)
        working = sorted(host for host, status in statuses.items() if status not in EXITED)
        if working and now < held.handover_until:
            ask_to_stop(rt, crawl, held, working)
            rt.set_waiting_reason(crawl, f"{WAITING} ({', '.join(working)})", now)
            return True
        take_over(rt, crawl, sorted(statuses), working, now)
    except (redis.RedisError, ArchiverError) as exc:
        what = str(exc) if isinstance(exc, ArchiverError) else f"Redis failed ({type(exc).__name__})"
        if (now - held.handover_until).total_seconds() < rt.redis_grace:
            if rt.episodes.begin(f"handover-{crawl.pk}"):
                rt.note(crawl, f"handing over from its old home waits: {what}", "warning", now)
            rt.set_waiting_reason(crawl, f"{WAITING}: {what[:150]}", now)
            return True
        # Waiting longer would hold the crawl forever; supervision deals with what is wrong.
        rt.note(crawl, f"gave up handing over from its old home ({what}): pages it did not "
                       "upload are lost", "error", now)
    rt.episodes.end(f"handover-{crawl.pk}")
    held.handover_until = None
    if crawl.pk in rt.held:
        rt.set_waiting_reason(crawl, "", now)
    return False


def ask_to_stop(rt: Runtime, crawl: Crawl, held: Held, hosts: list[str]) -> None:
    for host in hosts:
        if host not in held.stopping_old_hosts:
            rt.store.stop_one(crawl.redis_db, crawl.pk, host)
            held.stopping_old_hosts.add(host)
            rt.event(f"crawl {crawl.short_id}: asked its old crawler {host} to stop")


def take_over(rt: Runtime, crawl: Crawl, hosts: list[str], silent: list[str], now: dt.datetime) -> None:
    """Record, name, then requeue what no archive holds; the old instances forgotten."""
    record_reported(rt, crawl, now)
    if rt.settings.s3 and rt.store.client(crawl.redis_db).llen(uploads.reports_key(crawl.pk)):
        # Not recorded yet (the store is away): their pages would look lost.
        raise storage.StorageError("object storage: uploads are not recorded yet")
    # An upload whose host died before it reported it holds pages too (StorageError: wait).
    record_kept(rt, crawl, uploads.record_unreported(rt, crawl, now), now)
    drain_rest(rt, crawl, now)  # what they reported, so the pages named next exist
    name_from_bucket(rt, crawl, now)
    requeued = requeue_unarchived(rt, crawl)
    for host in hosts:  # their `done` must not end the crawl, nor their `:stopone` stop ours
        rt.store.forget_instance(crawl.redis_db, crawl.pk, host)
    if silent:
        rt.note(crawl, f"its old crawlers {', '.join(silent)} did not stop in time; "
                       "taken as gone with their host", "warning", now)
    if requeued:
        rt.note(crawl, f"{requeued} page(s) done on its old home are in no uploaded archive; "
                       "queued again", "warning", now)


def requeue_unarchived(rt: Runtime, crawl: Crawl) -> int:
    """Pages done that no recorded archive holds, back in the crawl's queue and counted
    undone, BATCH at a time (a long session lost with its host can be many pages)."""
    seeds, total = list(crawl.seeds), 0
    while lost := list(Snapshot.objects.filter(crawl=crawl, status=SnapshotStatus.DONE, filename="")
                       .values_list("pk", "url", "depth", "seed")[:BATCH]):
        entries = {json.dumps({"url": url, "seedId": seeds.index(url) if seed and url in seeds else 0,
                               "depth": depth, "extraHops": 0}, separators=(",", ":")): depth
                   for _pk, url, depth, seed in lost}
        rt.store.requeue(crawl.redis_db, crawl.pk, entries)
        Snapshot.objects.filter(pk__in=[row[0] for row in lost]).update(status=SnapshotStatus.QUEUED)
        total += len(lost)
    return total


def name_from_bucket(rt: Runtime, crawl: Crawl, now: dt.datetime) -> None:
    """Snapshot.filename for the pages of each of the crawl's archives in the bucket, read
    from the object's page lists (a few ranged GETs each, not the whole WACZ). The store
    away raises StorageError (the handover waits); an archive that cannot be read is said
    (name_listed), and its pages, if done, are crawled again rather than trusted to it.
    What the crawlers reported is read before (take_over), so the pages exist."""
    objects = storage.object_store(rt.settings)
    if objects is None:
        return
    limits = archive.Limits.of(rt.settings, rt.stop_event)
    for key, size in crawl.files.filter(root=objects.target.root).values_list("path", "size"):
        with objects.open(key, size) as handle:
            name_listed(rt, crawl, key, wacz_members.page_entries(handle, size, limits), now)

"""Recovery: the launcher's instances against the database, every tick.

Instances no active crawl of ours owns are removed (what one archived for a crawl another
runner adopted meanwhile is kept for that crawl); instances a crash left unrecorded (the
launch happened, the row update did not) are written on their Process row, for both
launchers. The listing is kept for the tick, so supervision does not ask the engine again.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil

from archiver.errors import EngineUnavailable, LaunchError
from crawls.models import Crawl, CrawlStatus, ExitReason, Process
from runner import archive
from runner.keep import keep_instance_leftovers, keep_leftovers, keep_session, record_kept
from runner.outage import Absence
from runner.state import Runtime
from runner.steps import claim

log = logging.getLogger("runner.daemon")
S = CrawlStatus


def recover(rt: Runtime, now: dt.datetime) -> bool:
    """Remove instances no active crawl owns; adopt refs a crash left unrecorded."""
    outage = launcher_outage(rt)
    try:
        instances = rt.launcher.list()
    except EngineUnavailable as exc:  # each crawl's own log says so, and shows it waiting
        rt.listed = None
        outage.failed(exc)
        return False
    except LaunchError as exc:  # the engine refuses
        rt.listed = None
        if rt.episodes.begin("engine-list"):
            log.warning("cannot list crawler instances: %s", exc)
        return False
    outage.recovered()
    if rt.episodes.end("engine-list"):
        log.info("the launcher answers again")
    rt.listed = {instance.ref: instance for instance in instances}
    if not instances:
        return False
    crawls = Crawl.objects.in_bulk({i.crawl_id for i in instances})
    rows = Process.objects.in_bulk({i.process_id for i in instances if i.process_id})
    found = False
    for instance in instances:
        crawl, row = crawls.get(instance.crawl_id), rows.get(instance.process_id)
        if crawl is not None and crawl.lease_is_live(now) and crawl.lease_owner != rt.id \
                and (row is None or row.is_live):
            continue  # another live runner supervises it (a shared swarm lists its services too)
        if is_orphan(crawl, row):
            found |= remove_orphan(rt, instance)
            if adopted_away(rt, crawl, row):
                keep_orphaned(rt, crawl, row, now)
        elif row.started_at is None or rt.launcher.ref_of(row) != instance.ref:
            # Launched, but the row update was cut short (kill -9): record what runs. (A
            # local instance's ref is its row's path: there is no id to record.)
            ref = instance.ref if rt.launcher.ref_of(row) != instance.ref else ""
            row.mark_running(now, ref=ref, pid=instance.pid, runner=rt.id, launcher=rt.launcher.name,
                             done=crawl.pages_done)
    return found


def launcher_outage(rt: Runtime) -> Absence:
    """The launcher (the Docker engine) away, said in the daemon's log once for all crawls:
    when it starts, once a minute while it lasts, when it ends (a restart: seconds)."""
    if rt.launcher_outage is None:
        rt.launcher_outage = Absence("runner", rt.launcher.depends_on)
    return rt.launcher_outage


def is_orphan(crawl: Crawl | None, row: Process | None) -> bool:
    return (crawl is None or crawl.is_final or crawl.status == S.PAUSED or row is None
            or not row.is_live)


def remove_orphan(rt: Runtime, instance) -> bool:
    rt.event(f"removing orphan instance {instance.ref[:40]} of crawl {instance.crawl_id[:8]}")
    try:
        rt.launcher.remove(instance.ref)
    except EngineUnavailable:
        rt.listed = None
    except LaunchError as exc:
        log.warning("could not remove orphan %s: %s", instance.ref[:40], exc)
    return True


def adopted_away(rt: Runtime, crawl: Crawl | None, row: Process | None) -> bool:
    """An instance of ours whose crawl another runner adopted while we were gone (or hung):
    that runner relaunched it elsewhere, and never sees what this one archived here."""
    return (crawl is not None and row is not None and row.exit_reason == ExitReason.ORPHANED
            and crawl.home_dir not in ("", claim.home_of(rt)))


def keep_orphaned(rt: Runtime, crawl: Crawl, row: Process, now: dt.datetime) -> None:
    """What a crawler we found still running for a crawl that left us archived: recorded for
    that crawl from this data dir (its session's WACZ, and WARCs it did not package: no later
    session will pack them, since the crawl now runs elsewhere)."""
    keep_session(rt, crawl, row, now)
    keep_instance_leftovers(rt, crawl, row, now)


def keep_what_is_left_here(rt: Runtime, now: dt.datetime) -> bool:
    """At start-up: crawls this data dir still holds files of, but that are not ours to run
    any more (they ended, or a runner adopted them while we were dead). What their instances
    left is kept and recorded, files in archives/ that no row records are recorded (never
    deleted), and their working folders go once nothing is left behind."""
    data_dir, home = rt.settings.data_dir, claim.home_of(rt)
    limits = archive.Limits.of(rt.settings)
    working = {p.name for p in rt.settings.crawls_dir.iterdir()} if rt.settings.crawls_dir.is_dir() else set()
    found = False
    for crawl in Crawl.objects.filter(pk__in=working | set(archive.archived_crawl_ids(data_dir, limits))):
        if crawl.status in S.ACTIVE and crawl.home_dir in ("", home):
            continue  # still ours: supervision keeps its files as its instances end
        for process in crawl.processes.filter(started_at__isnull=False).order_by("created_at", "pk"):
            keep_session(rt, crawl, process, now)
        record_kept(rt, crawl, archive.adopt_unrecorded(data_dir, crawl, now, limits), now)
        if crawl.pk in working and not keep_leftovers(rt, crawl, now):
            shutil.rmtree(rt.settings.crawls_dir / crawl.pk, ignore_errors=True)
        found = True
    return found

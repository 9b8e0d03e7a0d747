"""Recovery: the launcher's instances against the database, every tick.

Instances no active crawl of ours owns are removed; instances a crash left unrecorded (the
launch happened, the row update did not) are written on their Process row, for both
launchers. The listing is kept for the tick, so supervision does not ask the engine again.
"""

from __future__ import annotations

import datetime as dt
import logging

from archiver.errors import EngineUnavailable, LaunchError
from crawls.models import Crawl, CrawlStatus, Process
from runner.state import Runtime

log = logging.getLogger("runner.daemon")
S = CrawlStatus


def recover(rt: Runtime, now: dt.datetime) -> bool:
    """Remove instances no active crawl owns; adopt refs a crash left unrecorded."""
    try:
        instances = rt.launcher.list()
    except LaunchError as exc:  # the engine is away or refuses: supervision says so per crawl
        rt.listed = None
        if rt.episodes.begin("engine-list"):
            log.warning("cannot list crawler instances: %s", exc)
        return False
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
        if crawl is not None and crawl.lease_is_live(now) and crawl.lease_owner != rt.id:
            continue  # another live runner's: never touch it
        if is_orphan(crawl, row):
            found |= remove_orphan(rt, instance)
        elif row.started_at is None or rt.launcher.ref_of(row) != instance.ref:
            # Launched, but the row update was cut short (kill -9): record what runs. (A
            # local instance's ref is its row's path: there is no id to record.)
            ref = instance.ref if rt.launcher.ref_of(row) != instance.ref else ""
            row.mark_running(now, ref=ref, runner=rt.id, launcher=rt.launcher.name)
    return found


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

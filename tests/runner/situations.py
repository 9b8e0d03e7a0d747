"""Hand-made situations for runner/decide.py: a crawl, what the runner holds about it and what
it observed this tick, built from unsaved model instances (no database, Redis or engine)."""

from __future__ import annotations

import datetime as dt

from crawls.models import Crawl, CrawlMessage, CrawlStatus, Process, ProcessStatus
from runner.decide import Policy
from runner.launchers import hostname
from runner.launchers.base import Instance
from runner.observe import Observation
from runner.progress import Progress
from runner.state import Held

S = CrawlStatus
T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
POLICY = Policy(redis_grace=60, corrupt_grace=30, cancel_grace=30, count_every=15, stall_minutes=15)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def crawl(status: str = S.RUNNING, scale: int = 1, **fields) -> Crawl:
    """A crawl row as the runner holds it; it started at T0 and did a page then, unless told."""
    fields.setdefault("started_at", T0)
    fields.setdefault("progress_at", T0)
    return Crawl(id="c" * 32, status=status, scale=scale, **fields)


def held(**fields) -> Held:
    """What the runner remembers; its time was counted at T0, so no count is due before 15 s."""
    fields.setdefault("counted_at", T0)
    return Held(token=1, renewed_at=T0, **fields)


def process(instance: int = 0, pk: int | None = None, status: str = ProcessStatus.RUNNING,
            started_at: dt.datetime | None = T0, **fields) -> Process:
    """An instance's row: launched at T0 unless `started_at` is None (a pending relaunch)."""
    return Process(pk=pk if pk is not None else 10 + instance, instance=instance, status=status,
                   started_at=started_at, **fields)


def seen(row: Process, running: bool = True, exit_code: int | None = None, oom: bool = False) -> Instance:
    """The launcher's view of the instance a row launched."""
    return Instance(ref=f"fake-{row.pk}", crawl_id="c" * 32, instance=row.instance, process_id=row.pk,
                    running=running, exit_code=exit_code, oom=oom)


def message(of: Crawl) -> CrawlMessage:
    return CrawlMessage(crawl=of, payload={"type": "addExclusion", "regex": "/private/"})


def observed(of: Crawl, *statuses: str | None, now: dt.datetime = T0, rows: tuple = (),
             running: tuple = (), exited: tuple = (), **fields) -> Observation:
    """What the runner read this tick. `statuses` are the crawlers' own, by instance (None:
    that instance wrote none); `rows` the crawl's live Process rows, of which `running` are
    running instances and `exited` holds (row, exit code, oom) of instances that ended.
    Redis answers unless a `fault` is given."""
    instances = {row.pk: seen(row) for row in running}
    for row, code, oom in exited:
        instances[row.pk] = seen(row, running=False, exit_code=code, oom=oom)
    if "fault" not in fields:
        fields.setdefault("progress", Progress(statuses={
            hostname(of.pk, i): status for i, status in enumerate(statuses) if status is not None}))
    return Observation(crawl=of, now=now, processes=list(rows), instances=instances, **fields)

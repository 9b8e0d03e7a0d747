"""The bucket away (ARCHIVER_STORAGE_URL=s3://...): waited out, then the crawl ends saying so.

Two moments of a crawl need the bucket (docs/storage.md):

- a crawler's upload of its session's WACZ: when it fails the crawler exits 22 and keeps its
  WARCs. That is no failure of the crawler: the instance is relaunched with backoff (1, 2,
  4 ... s, cap 60 s) and packages and uploads again, counting against no launch attempt;
- the runner's recording of the uploads when the crawl ends (their reports, the objects no
  report named, the leftovers pushed): the crawl is not finished while the bucket does not
  answer, since its Redis database, which holds the reports, goes with the end.

Either way it is said once when it starts and once when it ends, and after
ARCHIVER_STORAGE_GRACE seconds of it the crawl fails with that cause first ("the bucket
s3://b was unreachable for 600 s (...)"); what it archived is kept under the data dir.
"""

from __future__ import annotations

import datetime as dt

from archiver.errors import CrawlFailed
from crawls import storage
from crawls.models import Crawl, CrawlLog, ExitReason
from runner import decide
from runner.launchers import hostname
from runner.state import Runtime

BUCKET_WAIT = "waiting: bucket unreachable"
KEPT_HERE = "what it archived is kept under the data dir"
END_WAIT = "the bucket does not answer"  # begins the line that starts an end's wait


def unreachable(rt: Runtime, crawl: Crawl) -> str | None:
    """Why the bucket does not answer now (one HEAD in the crawl's prefix), or None."""
    objects = storage.object_store(rt.settings)
    if objects is None:
        return None
    try:
        objects.head(rt.settings.s3.crawl_prefix(crawl.pk))
    except storage.StorageError as exc:
        return str(exc)
    return None


def gone_for(rt: Runtime, waited: float, what: str) -> str:
    return (f"the bucket s3://{rt.settings.s3.bucket} was unreachable for {waited:.0f} s "
            f"({what}); {KEPT_HERE}")


# --- a crawler's upload failed ----------------------------------------------------------


def upload_failures(history: list[tuple]) -> tuple[int, dt.datetime | None]:
    """The instance's upload failures in a row at the end of its history (rows of
    exit_reason, status, ended_at), and when the first of them ended."""
    count, since = 0, None
    for reason, _status, ended_at in reversed(history):
        if reason != ExitReason.STORAGE:
            break
        count, since = count + 1, ended_at
    return count, since


def relaunch_delay(rt: Runtime, crawl: Crawl, instance: int, history: list[tuple],
                   now: dt.datetime) -> float:
    """The wait before relaunching an instance whose upload failed; CrawlFailed once the
    bucket has been away ARCHIVER_STORAGE_GRACE seconds."""
    count, since = upload_failures(history)
    waited = (now - (since or now)).total_seconds()
    if waited >= rt.settings.storage_grace:
        raise CrawlFailed(gone_for(rt, waited, f"the crawler's upload failed {count} times, exit 22"),
                          detail=f"crawler instance {hostname(crawl.pk, instance)}: its WACZ "
                                 f"could not be uploaded {count} times")
    if count == 1:
        rt.note(crawl, f"instance {instance} could not upload its archive: the bucket does not "
                       f"answer; relaunching it until it does (for up to {rt.settings.storage_grace:g} s)",
                "warning", now)
        rt.set_waiting_reason(crawl, BUCKET_WAIT, now)
    return decide.relaunch_delay(count)


def after_upload_failure(crawl: Crawl, process) -> bool:
    """Whether the instance's session before this one ended in an upload failure."""
    before = (crawl.processes.filter(instance=process.instance, created_at__lte=process.created_at)
              .exclude(pk=process.pk).order_by("-created_at", "-pk").values_list("exit_reason", flat=True))
    return next(iter(before), None) == ExitReason.STORAGE


def exit_said(rt: Runtime, crawl: Crawl, process, reason: str, now: dt.datetime) -> bool:
    """Whether an exit in an outage of the bucket is worth a line: the first upload failure
    in a row is (relaunch_delay says the rest), and the first exit after them says it ended."""
    if not after_upload_failure(crawl, process):
        return True
    if reason != ExitReason.STORAGE:
        rt.note(crawl, f"instance {process.instance} reached the bucket again", now=now)
        if crawl.waiting_reason == BUCKET_WAIT:
            rt.set_waiting_reason(crawl, "", now)
        return True
    return False


# --- the crawl's end --------------------------------------------------------------------


def may_finish(rt: Runtime, crawl: Crawl, now: dt.datetime) -> bool:
    """Whether the crawl may end now: the bucket answers (or there is none). While it does
    not, the crawl waits (said once), and CrawlFailed past ARCHIVER_STORAGE_GRACE."""
    why = unreachable(rt, crawl) if rt.settings.s3 is not None else None
    since = end_waited_since(crawl) if crawl.waiting_reason == BUCKET_WAIT else None
    if why is None:
        if since is not None:
            rt.note(crawl, f"the bucket answers again after {(now - since).total_seconds():.0f} s; "
                           "ending the crawl", now=now)
        if crawl.waiting_reason == BUCKET_WAIT:
            rt.set_waiting_reason(crawl, "", now)
        return True
    if since is None:
        since = now
        rt.note(crawl, f"{END_WAIT} ({why}); the crawl ends once its uploads are recorded "
                       f"(waiting up to {rt.settings.storage_grace:g} s)", "warning", now)
        rt.set_waiting_reason(crawl, BUCKET_WAIT, now)
    waited = (now - since).total_seconds()
    if waited >= rt.settings.storage_grace:
        raise CrawlFailed(gone_for(rt, waited, why), detail="its uploads could not be recorded")
    return False


def end_waited_since(crawl: Crawl) -> dt.datetime | None:
    """When the crawl's end began to wait for the bucket: its log's line saying so, which
    also outlives a restart of the daemon (the wait is not begun again)."""
    return (CrawlLog.objects.filter(crawl=crawl, source="runner", message__startswith=END_WAIT)
            .order_by("-created_at").values_list("created_at", flat=True).first())

"""The automatic quality review of crawls added with --qa (runner/qa.py does the review).

Ending such a crawl queues one QualityReview row in the same transaction (Crawl.finish), so
each end gets exactly one review. It is due once the runner has kept the crawl's files
(`make_due`, from runner.ending.clean_up). The QaWorker's threads (LANES) claim due rows
through the lease queue (crawls/lease.py) and replay them in Chromium: never the tick, which
a review of many pages would hold for minutes. A review is claimed only for an org none of
whose reviews runs now, so one org's reviews (hostile pages each holding a page's deadline,
runner/qa.py) take at most one lane and another org's review starts on the other. While it replays, the lease is renewed; a
runner that dies mid-review leaves the row to expire and be claimed again (the review starts
over: its rows are swapped in at the end only). The outcome is written with the lease token,
so a review whose lease was lost changes nothing.

Outcomes: done (pages reviewed), skipped (no Chromium here, or nothing kept to replay: the
reason is recorded), failed (the reason; `archiver qa ID` tries again). A review never
changes the crawl's own state.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Callable

from django.db import connection, transaction

from archiver.conf import Settings
from crawls.lease import db_now
from crawls.models import Crawl, QualityReview, ReviewStatus
from runner import qa
from runner.outage import fresh_connection
from runner.polling import PollingThreads

log = logging.getLogger("runner.daemon")
R = ReviewStatus
LANES = 2  # reviews at once in the daemon, each with its own Chromium


def make_due(crawl: Crawl, now: dt.datetime) -> bool:
    """The crawl's files are kept: its queued review may start now."""
    return bool(QualityReview.objects.filter(crawl_id=crawl.pk, status=R.QUEUED, lease_owner="",
                                             retry_at__gt=now).update(retry_at=now))


def review_next(settings: Settings, owner: str, now: dt.datetime,
                stop: threading.Event | None = None, clock: Callable[[], dt.datetime] = db_now,
                claiming: threading.Lock | None = None) -> bool:
    """Claim one due review and run it: whether one was claimed. `claiming` serialises the
    claims of one runner's lanes, so each sees the org the other has just taken."""
    with claiming or contextlib.nullcontext():
        claims = due_for_a_free_org(now).claim(owner, now, settings.lease_seconds)
    if not claims:
        return False
    run_claimed(settings, claims[0].pk, claims[0].token, now, stop, clock)
    return True


def due_for_a_free_org(now: dt.datetime):
    """Reviews that may be claimed: of orgs none of whose reviews is held under a live lease (a
    runner's or `archiver qa`'s; a claimed row is marked running only after its claim)."""
    busy = QualityReview.objects.filter(retry_at__gt=now).exclude(lease_owner="").values("crawl__org_id")
    return QualityReview.objects.filter(status__in=(R.QUEUED, R.RUNNING)).exclude(crawl__org_id__in=busy)


def take(crawl: Crawl, owner: str, now: dt.datetime, lease_seconds: float) -> tuple[QualityReview, int] | None:
    """`archiver qa ID`: the crawl's review row, taken now whatever its state unless another
    holds a live lease on it (None then)."""
    with transaction.atomic():
        row, _ = QualityReview.objects.get_or_create(crawl=crawl, defaults={"created_at": now})
        row = QualityReview.objects.select_for_update().get(pk=row.pk)
        if row.lease_is_live(now) and row.status == R.RUNNING:
            return None
        token = row.lease_token + 1
        QualityReview.objects.filter(pk=row.pk).update(
            lease_token=token, lease_owner=owner, status=R.RUNNING, started_at=now,
            attempts=row.attempts + 1, retry_at=now + dt.timedelta(seconds=lease_seconds))
    row.refresh_from_db()
    return row, token


def run_claimed(settings: Settings, pk, token: int, now: dt.datetime,
                stop: threading.Event | None = None, clock: Callable[[], dt.datetime] = db_now,
                limit: int | None = None, workers: int = 2, mark: bool = True) -> QualityReview:
    """Run the review we hold (token) and record its outcome; exceptions are recorded, not
    raised, except an interruption (the row is then due again at once)."""
    row = QualityReview.objects.select_related("crawl").get(pk=pk)
    if mark:
        QualityReview.objects.filter(pk=pk, lease_token=token).update(
            status=R.RUNNING, started_at=now, attempts=row.attempts + 1)
    held = lambda: QualityReview.objects.filter(pk=pk, lease_token=token).exists()  # noqa: E731
    renewing = Renewal(pk, token, settings.lease_seconds, clock).start()
    try:
        pages = qa.review(row.crawl, settings, limit=limit, workers=workers, stop=stop, swap=held,
                          before_swap=renewing.stop)
    except qa.ReviewInterrupted as exc:
        renewing.stop()
        QualityReview.objects.release(pk, token, clock())
        log.info("crawl %s: quality review interrupted (%s); due again", row.crawl.short_id, exc)
        raise
    except qa.NoBrowser as exc:
        return record(row, token, R.SKIPPED, str(exc), clock(), renewing)
    except qa.ReviewRefused as exc:
        # Nothing kept to replay (ended without an archive): no review to do.
        status = R.SKIPPED if row.crawl.files.count() == 0 else R.FAILED
        return record(row, token, status, str(exc), clock(), renewing)
    except Exception as exc:  # noqa: BLE001 - a review's failure is recorded; the crawl stays as it ended
        log.exception("crawl %s: quality review failed", row.crawl.short_id)
        return record(row, token, R.FAILED, f"{type(exc).__name__}: {exc}", clock(), renewing)
    return record(row, token, R.DONE, "", clock(), renewing, pages)


def record(row: QualityReview, token: int, status: str, error: str, now: dt.datetime,
           renewing: Renewal, pages: int = 0) -> QualityReview:
    renewing.stop()
    if status != R.DONE:
        log.warning("crawl %s: quality review %s: %s", row.crawl.short_id, status, error)
    QualityReview.objects.filter(pk=row.pk, lease_token=token).update(
        status=status, error=error[:2000], pages=pages, finished_at=now, retry_at=None, lease_owner="")
    row.refresh_from_db()
    return row


class Renewal:
    """Renews a review's lease from its own thread while the review replays."""

    def __init__(self, pk, token: int, lease_seconds: float, clock: Callable[[], dt.datetime]):
        self.pk, self.token, self.lease, self.clock = pk, token, lease_seconds, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"qa-lease-{pk}")

    def start(self) -> Renewal:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.lease / 3):
                fresh_connection()  # one broken by a database restart is opened again
                try:
                    if not QualityReview.objects.renew(self.pk, self.token, self.clock(), self.lease):
                        return  # lost: the swap at the end is refused
                except Exception:  # noqa: BLE001 - tried again at the next renewal
                    log.warning("quality review %s: could not renew its lease", self.pk)
        finally:
            connection.close()


class QaWorker(PollingThreads):
    """Threads next to the runner's loop (LANES), each running due reviews one at a time."""

    what = "quality review pass"

    def __init__(self, settings: Settings, owner: str, *, poll_interval: float | None = None,
                 clock: Callable[[], dt.datetime] = db_now, lanes: int = LANES):
        super().__init__([(f"qa-{n}", owner) for n in range(1, lanes + 1)],
                         settings.poll_interval if poll_interval is None else poll_interval)
        self.settings, self.owner, self.clock = settings, owner, clock
        self.claiming = threading.Lock()

    def pass_once(self, owner: str) -> bool:
        try:
            return review_next(self.settings, owner, self.clock(), self.stop_event, self.clock, self.claiming)
        except qa.ReviewInterrupted:
            return False


def attach(settings: Settings, runner_id: str, mode: str, steps: list, stop: threading.Event,
           clock: Callable[[], dt.datetime]) -> QaWorker | None:
    """A runner's reviews: in a thread of their own in the daemon (a review replays for
    minutes; the tick never waits for it), else (`run --once`, `--drain`) a step of the tick."""
    owner = lease_owner(runner_id)
    if mode == "daemon":
        return QaWorker(settings, owner, clock=clock).start()
    steps.append(("quality review", lambda now: review_next(settings, owner, now, stop, clock)))
    return None


def has_due(now: dt.datetime) -> bool:
    return QualityReview.objects.due(now).filter(status=R.QUEUED).exists()


def lease_owner(runner_id: str) -> str:
    return f"{runner_id}/qa"

"""What the runner writes about a crawl it holds, as Crawl methods (the `RunnerTransitions`
mixin): each names the lease token it won, so a runner that lost the lease changes nothing."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.db.models import F

from archiver import conf
from crawls.models.qa import QualityReview, ReviewStatus
from crawls.models.statuses import EVENT_FOR_FINAL, CrawlStatus, Intent, StopReason

S = CrawlStatus

# Seconds after its end a crawl's review is due at the latest (its files are normally kept
# well before: then it is due at once).
REVIEW_GRACE = 60

# What the runner may write through Crawl.record_progress (counters and what it shows).
PROGRESS_FIELDS = frozenset({"pages_found", "pages_done", "pages_failed", "size_bytes",
                             "progress_at", "waiting_reason"})


class RunnerTransitions:
    """The runner's transitions and writes of a Crawl (mixed into it)."""

    def record_progress(self, token: int, now, **fields) -> bool:
        """Write what the runner observed (counters, progress time, waiting reason) with our
        token; only PROGRESS_FIELDS, so this can never move the crawl's state."""
        unknown = set(fields) - PROGRESS_FIELDS
        assert not unknown, f"record_progress cannot write {sorted(unknown)}"
        if not self._rows(lease_token=token).update(**fields, updated_at=now):
            return False
        for name, value in fields.items():
            setattr(self, name, value)
        return True

    def take_redis_db(self, db: int, token: int) -> bool:
        """Win Redis database `db` for this crawl; False if another crawl holds it (the unique
        index refuses the second holder) or our lease moved."""
        try:
            with transaction.atomic():
                won = self._rows(lease_token=token, redis_db=None).update(redis_db=db)
        except IntegrityError:
            return False
        if won:
            self.redis_db = db
        return bool(won)

    def record_kept_bytes(self, size: int, token: int) -> bool:
        """The bytes of its kept files once they are all recorded. Also after it ended (it
        then holds no lease but keeps its token): a crawl retried or taken over since has
        another token and is left alone."""
        if not self._rows(lease_token=token).update(size_bytes=size):
            return False
        self.size_bytes = size
        return True

    def record_imported_pages(self, pages: int) -> None:
        """An import's pages: all of them archived when it is kept (runner/intake.py)."""
        type(self).objects.filter(pk=self.pk).update(pages_found=pages, pages_done=pages)
        self.pages_found = self.pages_done = pages

    def set_home(self, runner_id: str, data_dir: str, token: int) -> bool:
        """Record which runner and data dir hold this crawl's instances and files from now on."""
        if not self._rows(lease_token=token).update(home_runner=runner_id, home_dir=data_dir):
            return False
        self.home_runner, self.home_dir = runner_id, data_dir
        return True

    def request_disk_pause(self, reason: str, token: int, now) -> bool:
        """Pause a running crawl for a full disk; the reason (DISK_PAUSE...) tells it from a
        pause a person asked for, and lets the runner resume it when space returns."""
        rows = self._rows(lease_token=token, status__in=S.RUNNING_STATES, intent="")
        if not rows.update(intent=Intent.PAUSE, waiting_reason=reason[:300], updated_at=now):
            return False
        self.intent, self.waiting_reason = Intent.PAUSE, reason[:300]
        return True

    def record_user_stop(self, token: int, now) -> bool:
        """A stop a person asked for becomes the crawl's stop reason (the first one stays)."""
        if not self._rows(lease_token=token, stop_reason="").update(
                stop_reason=StopReason.USER, updated_at=now):
            return False
        self.stop_reason = StopReason.USER
        return True

    def mark_waiting(self, status: str, reason: str, token: int, now) -> bool:
        return self._transition("mark_waiting", now, to=status, token=token, waiting_reason=reason)

    def mark_starting(self, token: int, now) -> bool:
        # Each session starts the stall clock afresh: time paused or queued is not a stall.
        return self._transition("mark_starting", now, token=token, waiting_reason="",
                                progress_at=now)

    def mark_running(self, token: int, now) -> bool:
        first = self.started_at is None
        return self._transition(
            "mark_running", now, token=token, event="crawl.started" if first else None,
            started_at=self.started_at or now, waiting_reason="",
        )

    def mark_finishing(self, status: str, token: int, now) -> bool:
        return self._transition("mark_finishing", now, to=status, token=token)

    def mark_paused(self, token: int, now, reason: str = "") -> bool:
        limit = conf.get().pause_limit
        return self._transition(
            "mark_paused", now, token=token,
            event="crawl.paused", intent="", paused_at=now, waiting_reason=reason,
            retry_at=now + dt.timedelta(seconds=limit), lease_owner="",
        )

    def finish(self, status: str, token: int, now, *, stop_reason: str = "", error: str = "",
               error_detail: str = "") -> bool:
        """Move to a final state; the row leaves every queue (retry_at = NULL).

        It keeps its Redis database until the runner has flushed it (`release_redis_db`):
        released first, it could be won and filled by another crawl before our flush.
        """
        event = EVENT_FOR_FINAL.get(status, "crawl.stopped")
        with transaction.atomic():
            if not self._transition(
                "finish", now, to=status, token=token, event=event, stop_reason=stop_reason,
                error=error, error_detail=error_detail, finished_at=now, retry_at=None, lease_owner="", intent="",
                waiting_reason="",
            ):
                return False
            if status in (*S.SUCCESSFUL, S.FAILED) and self.config.get("qa"):
                self.queue_review(now)
        return True

    def queue_review(self, now) -> None:
        """Its quality review (--qa), in the transaction that ends it: exactly one per end.
        Due once the runner has kept its files (runner.ending.clean_up makes it due then),
        else after REVIEW_GRACE, should the runner die between the two. A review of an
        earlier session still running is fenced off (its token moves on)."""
        due = now + dt.timedelta(seconds=REVIEW_GRACE)
        fields = {"status": ReviewStatus.QUEUED, "error": "", "attempts": 0, "pages": 0,
                  "retry_at": due, "lease_owner": "", "started_at": None, "finished_at": None}
        if not QualityReview.objects.filter(crawl_id=self.pk).update(
                **fields, lease_token=F("lease_token") + 1):
            QualityReview.objects.create(crawl_id=self.pk, created_at=now, **fields)

    def release_redis_db(self, db: int) -> bool:
        """A final crawl gives its (flushed) Redis database back."""
        released = self._rows(redis_db=db, status__in=S.FINAL).update(redis_db=None)
        if released:
            self.redis_db = None
        return bool(released)

"""What people ask of a crawl, as Crawl methods (the `UserIntents` mixin).

At once where no runtime exists, else recorded as the crawl's intent for the runner. A
user transition that takes a crawl from the runner bumps its lease token (`_transition`).
"""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.db.models import F

from archiver import conf
from archiver.errors import NotAllowed
from crawls.config import MAX_SEEDS, CrawlConfig
from crawls.models.events import CrawlMessage
from crawls.models.org import Org
from crawls.models.pages import SnapshotStatus
from crawls.models.profiles import BrowserProfile
from crawls.models.statuses import CrawlStatus, Intent, StopReason
from crawls.rules import check_regex, crawlable

S = CrawlStatus

MAX_SCALE = 8  # crawler instances per crawl, as CrawlConfig.scale allows


class UserIntents:
    """Pause, resume, stop, cancel, retry, scale, exclusions and edits of a Crawl (mixed into it)."""

    def pause(self, now: dt.datetime) -> None:
        limit = conf.get().pause_limit
        if self._transition("pause", now, event="crawl.paused",
                            paused_at=now, intent="", waiting_reason="",
                            retry_at=now + dt.timedelta(seconds=limit), lease_owner=""):
            return
        # Paused by the runner for a full disk: from now on paused by a person, so it is
        # not resumed on its own when space returns.
        if self._rows(status=S.PAUSED, waiting_reason__startswith="paused: ").update(
                waiting_reason="", updated_at=now):
            self.waiting_reason = ""
            return
        if not self._rows(status__in=S.RUNNING_STATES).update(intent=Intent.PAUSE):
            raise self._refuse("pause")
        self.intent = Intent.PAUSE

    def resume(self, now: dt.datetime) -> None:
        if self._transition("resume", now, event="crawl.resumed", intent="",
                            paused_at=None, retry_at=now, lease_owner="", waiting_reason=""):
            return
        # A pause the runner has not carried out yet is simply withdrawn.
        if not self._rows(status__in=S.RUNNING_STATES, intent=Intent.PAUSE).update(intent=""):
            raise self._refuse("resume")
        self.intent = ""

    def stop(self, now: dt.datetime) -> None:
        self._end_on_request(Intent.STOP, now)

    def cancel(self, now: dt.datetime) -> None:
        self._end_on_request(Intent.CANCEL, now)

    def _end_on_request(self, intent: str, now: dt.datetime) -> None:
        """A crawl that never started ends canceled at once; others are ended by the runner."""
        if not self.has_runtime and self._transition(
            "cancel", now, event="crawl.canceled", intent="",
            stop_reason=StopReason.USER, finished_at=now, retry_at=None, lease_owner="",
            waiting_reason="",
        ):
            return
        # A paused crawl holds no lease: make it due so a runner finishes it now.
        if self._rows(status=S.PAUSED).update(intent=intent, retry_at=now):
            self.intent = intent
            return
        if not self._rows(status__in=(*S.RUNNING_STATES, *S.NOT_STARTED)).update(intent=intent):
            raise self._refuse(intent)
        self.intent = intent

    def retry(self, now: dt.datetime) -> None:
        """Queue a failed or canceled crawl again, as a new attempt with fresh progress."""
        if not self._transition(
            "retry", now, event="crawl.queued",
            attempts=self.attempts + 1, retry_at=now, lease_owner="", intent="",
            stop_reason="", error="", error_detail="", waiting_reason="", finished_at=None,
            started_at=None, pages_found=0, pages_done=0, pages_failed=0, elapsed_seconds=0, stalls=0,
            redis_db=None, progress_at=None, config_override={},
        ):
            raise self._refuse("retry")

    def set_scale(self, scale: int, now: dt.datetime) -> None:
        """Ask for `scale` instances; the runner launches or stops instances to match."""
        if not 1 <= scale <= MAX_SCALE:
            raise NotAllowed(f"scale must be from 1 to {MAX_SCALE}, not {scale}")
        if not self._rows(status__in=S.ACTIVE).update(scale=scale, updated_at=now):
            raise self._refuse("scale")
        self.scale = scale

    def change_exclusion(self, regex: str, now: dt.datetime, *, remove: bool = False) -> None:
        """Add (or remove) an exclusion: kept in its config, and sent live to running instances."""
        check_regex(regex)
        with transaction.atomic():
            crawl = self._rows(status__in=S.ACTIVE).select_for_update().first()
            if crawl is None:
                raise self._refuse("change the exclusions of")
            excludes = list(crawl.config.get("exclude", []))
            if remove and regex not in excludes:
                raise NotAllowed(f"crawl {self.short_id} has no exclusion {regex!r}")
            if not remove and regex in excludes:
                raise NotAllowed(f"crawl {self.short_id} already excludes {regex!r}")
            excludes = [rx for rx in excludes if rx != regex] if remove else [*excludes, regex]
            self.config = {**crawl.config, "exclude": excludes}
            self._rows().update(config=self.config, updated_at=now)
            if crawl.has_runtime:
                kind = "removeExclusion" if remove else "addExclusion"
                CrawlMessage.objects.create(crawl=self, payload={"type": kind, "regex": regex},
                                            created_at=now)

    def failed_pages(self):
        return self.snapshots.filter(status=SnapshotStatus.FAILED).order_by("id")

    def retry_failed_pages(self, now: dt.datetime) -> int:
        """Queue a finished crawl again for exactly its failed pages, into the same archive.

        A new session: the failed snapshots go back to queued, and the override makes them
        the seeds of a page-scoped, depth-0 crawl. Returns how many pages are retried.
        """
        with transaction.atomic():
            # The crawler reported these URLs: only those that pass the seed rules (no
            # credentials, a valid host, a length cap) become seeds, at most MAX_SEEDS.
            urls = [url for url in self.failed_pages().values_list("url", flat=True) if crawlable(url)]
            urls = urls[:MAX_SEEDS]
            if not urls:
                self.refresh_from_db()
                raise NotAllowed(f"crawl {self.short_id} has no failed pages to retry")
            override = {
                "seeds": urls, "scope_type": "page", "depth": 0, "extra_hops": 0,
                "page_limit": len(urls), "size_limit": None, "time_limit": None,
                "sitemap": None, "sitemap_since": None, "seed_file": None,  # the failed pages only
            }
            if not self._transition(
                "retry_failed_pages", now, event="crawl.queued",
                config_override=override, attempts=self.attempts + 1, retry_at=now,
                lease_owner="", intent="", stop_reason="", error="", error_detail="",
                waiting_reason="", finished_at=None, redis_db=None, stalls=0, progress_at=None, pages_failed=0,
            ):
                raise self._refuse("retry the failed pages of")
            self.failed_pages().update(status=SnapshotStatus.QUEUED, error="")
        return len(urls)

    def reconfigure(self, org: Org, config: CrawlConfig, tags, now: dt.datetime) -> None:
        """Change the org, configuration and tags of a crawl that has not started yet.

        The lease token moves on, so a runner that claimed it with the old configuration
        cannot start it (its guarded updates fail) and reads it again.
        """
        BrowserProfile.require(org, config.profile)
        fields = {"org": org, "seeds": config.seeds, "config": config.model_dump(mode="json"),
                  "tags": list(tags), "scale": config.scale, "updated_at": now, "retry_at": now,
                  "lease_owner": ""}
        rows = self._rows(status__in=S.NOT_STARTED, started_at__isnull=True, redis_db__isnull=True)
        if not rows.update(**fields, lease_token=F("lease_token") + 1):
            raise self._refuse("edit")
        for name, value in fields.items():
            setattr(self, name, value)

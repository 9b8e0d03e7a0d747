"""A crawl's own limits and the quotas of its org, as Crawl methods (the `CrawlLimits` mixin).

Pure where they can be: they read the crawl's fields and an `OrgUsageNow`, so tests pin
every boundary without a runner. The org-wide rules that read other crawls are in
crawls/quotas.py, which depends on the models, never the other way.
"""

from __future__ import annotations

import datetime as dt

from crawls.models.org import OrgUsageNow
from crawls.models.process import ProcessStatus, elapsed_with_uncounted
from crawls.models.statuses import CrawlStatus, Intent, StopReason

S = CrawlStatus

MAX_STALLS = 3  # a crawl that stalls this often fails with stop reason `stalled`


class CrawlLimits:
    """Limits, quotas, stalls and the pause limit of a Crawl (mixed into it)."""

    def effective_page_limit(self) -> int | None:
        """The crawl's page limit, capped by its org's maximum pages per crawl."""
        limits = [v for v in (self.config.get("page_limit"), self.org.max_pages_per_crawl) if v]
        return min(limits) if limits else None

    def elapsed_now(self, now: dt.datetime) -> float:
        """The running time at `now`: what is counted (every count interval and at each exit)
        plus the longest uncounted run of a running instance; what every view shows."""
        if self.is_final:
            return self.elapsed_seconds
        running = getattr(self, "running_processes", None)  # from with_running_processes()
        if running is None:
            running = self.processes.filter(status=ProcessStatus.RUNNING)
        return elapsed_with_uncounted(self.elapsed_seconds, running, now)

    def exec_now(self, now: dt.datetime) -> float:
        """The execution time at `now`: what is counted plus what every running instance ran
        since it was last counted (their sum, as the org's quota counts them)."""
        if self.is_final:
            return self.exec_seconds
        running = getattr(self, "running_processes", None)
        if running is None:
            running = self.processes.filter(status=ProcessStatus.RUNNING)
        return self.exec_seconds + sum(elapsed_with_uncounted(0.0, [process], now) for process in running)

    def limit_reached(self) -> StopReason | None:
        """The crawl's own limit it has reached, if any (pure: fields only)."""
        config = self.config
        if config.get("time_limit") and self.elapsed_seconds >= config["time_limit"]:
            return StopReason.TIME_LIMIT
        if config.get("size_limit") and self.size_bytes >= config["size_limit"]:
            return StopReason.SIZE_LIMIT
        page_limit = self.effective_page_limit()
        if page_limit and self.pages_done >= page_limit:
            return StopReason.PAGE_LIMIT
        return None

    # --- lifecycle rules (docs/lifecycle.md; org-wide rules in crawls/quotas.py) -------

    def stop_reason_due(self, usage: OrgUsageNow) -> StopReason | None:
        """The first reason this crawl must stop now, or None; the runner asks every tick.

        Its own limits first (time, size, pages), then its org's quotas. A failed-pages
        session is bounded by its list of URLs, so only the quotas apply to it.
        """
        reason = None if self.config_override else self.limit_reached()
        return reason or self.quota_reached(usage)

    def quota_reached(self, usage: OrgUsageNow) -> StopReason | None:
        """Which quota of its org is used up, given the org's usage now (pure)."""
        org = self.org
        if org.storage_quota_bytes is not None and usage.storage_bytes >= org.storage_quota_bytes:
            return StopReason.STORAGE_QUOTA
        if org.exec_minutes_quota is not None and usage.exec_seconds >= org.exec_minutes_quota * 60:
            return StopReason.EXEC_QUOTA
        return None

    def is_stalled(self, now: dt.datetime, stall_minutes: float) -> bool:
        """Running, and no page done for `stall_minutes` (before the first: since its start)."""
        since = self.progress_at or self.started_at
        return (
            self.status == S.RUNNING and since is not None
            and now - since >= dt.timedelta(minutes=stall_minutes)
        )

    @property
    def stalls_exhausted(self) -> bool:
        return self.stalls >= MAX_STALLS

    def record_stall(self, token: int, now: dt.datetime) -> bool:
        """Count one stall and restart the stall clock; False if the lease or the state moved."""
        rows = self._rows(lease_token=token, status=S.RUNNING, stalls=self.stalls)
        if not rows.update(stalls=self.stalls + 1, progress_at=now, updated_at=now):
            return False
        self.stalls, self.progress_at, self.updated_at = self.stalls + 1, now, now
        return True

    def pause_expired(self, now: dt.datetime, pause_limit: float) -> bool:
        """Paused for `pause_limit` seconds or more: it must end as stopped_pause_limit."""
        return (
            self.status == S.PAUSED and self.paused_at is not None
            and now - self.paused_at >= dt.timedelta(seconds=pause_limit)
        )

    def request_limit_stop(self, reason: str, token: int, now: dt.datetime) -> bool:
        """Record that a limit or quota stops this crawl gracefully; the first reason stays."""
        rows = self._rows(lease_token=token, status__in=S.RUNNING_STATES,
                          stop_reason="").exclude(intent=Intent.CANCEL)
        if not rows.update(stop_reason=reason, intent=Intent.STOP, updated_at=now):
            return False
        self.stop_reason, self.intent, self.updated_at = reason, Intent.STOP, now
        return True

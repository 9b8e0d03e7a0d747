"""A crawl's instances: one Process row per launched crawler (a container or an OS process)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import models
from django.db.models import Q
from django.utils import timezone

from crawls.config import human_size
from crawls.lease import Leased, LeaseQuerySet, due_index


class ProcessStatus(models.TextChoices):
    STARTING = "starting"  # being launched
    RUNNING = "running"  # container or process alive
    EXITED = "exited"  # ended; exit_code and exit_reason say how
    LOST = "lost"  # vanished without an exit status we could read


class ExitReason(models.TextChoices):
    NONE = "", "-"
    DONE = "done"  # exit 0
    OOM = "oom"  # 137 or killed by the OOM killer
    INTERRUPTED = "interrupted"  # 11/13: stopped by a signal, safe to relaunch
    PERMANENT = "permanent"  # 4, 17, or status `failed` on exit 0: a fatal error, never relaunched
    LIMIT = "limit"  # 14/15/16: a per-session limit, relaunch continues
    CRASH = "crash"  # anything else
    REMOVED = "removed"  # removed by archiver (cancel, scale down, orphan)
    DISK = "disk"  # 3: out of disk space; the crawl pauses for the disk, not a failure
    REDIS = "redis"  # 8: Redis was unavailable; relaunched once it answers, not a failure
    ORPHANED = "orphaned"  # its runner died; relaunched by the runner that adopted the crawl
    NO_PAGE = "no_page"  # 9: the crawler finished and no page succeeded; never relaunched
    UNREPORTED = "unreported"  # exit 0 with no final status in Redis: a failed attempt
    STORAGE = "storage"  # 22: its WACZ could not be uploaded; relaunched while the bucket is away, not a failure


LIVE_PROCESS = (ProcessStatus.STARTING, ProcessStatus.RUNNING)


def elapsed_with_uncounted(elapsed_seconds: float, processes: Iterable[Process], now: dt.datetime) -> float:
    """`elapsed_seconds` plus the longest run of a running process since it was last counted
    (pure; the runner's time limit and the views both use it)."""
    uncounted = [(now - (p.counted_until or p.started_at)).total_seconds() for p in processes
                 if p.status == ProcessStatus.RUNNING and (p.counted_until or p.started_at)]
    return elapsed_seconds + max([0.0, *uncounted])


class ProcessQuerySet(LeaseQuerySet):
    def live(self):
        """Instances that run, or are about to be launched."""
        return self.filter(status__in=LIVE_PROCESS)

    def pending(self):
        """Rows written for a launch that has not happened (yet, or its backoff runs)."""
        return self.live().filter(started_at__isnull=True)


class Process(Leased):
    """One launched crawler instance: a container or an OS process."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="processes")
    instance = models.PositiveSmallIntegerField(help_text="0..scale-1; part of the hostname.")
    hostname = models.CharField(max_length=80)
    launcher = models.CharField(max_length=16)
    container_id = models.CharField(max_length=80, blank=True, default="")
    pid = models.PositiveIntegerField(null=True, blank=True)
    image = models.CharField(max_length=200, blank=True, default="")
    args = models.JSONField(default=list)
    status = models.CharField(max_length=16, choices=ProcessStatus.choices, default=ProcessStatus.STARTING)
    exit_code = models.IntegerField(null=True, blank=True)
    exit_reason = models.CharField(max_length=16, choices=ExitReason.choices, blank=True, default="")
    log_tail = models.TextField(blank=True, default="")
    runner = models.CharField(max_length=64, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    counted_until = models.DateTimeField(
        null=True, blank=True, help_text="Running time up to here is in the crawl's exec seconds."
    )
    pages_done = models.PositiveIntegerField(
        default=0, help_text="Pages this session archived, recorded when it ended (docs/runner.md).")
    size_bytes = models.BigIntegerField(default=0, help_text="Bytes of the archive kept for this session.")
    done_at_start = models.PositiveIntegerField(
        null=True, blank=True, help_text="The crawl's pages done when this session was launched.")
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProcessQuerySet.as_manager()

    class Meta:
        ordering = ["crawl", "instance", "created_at"]
        verbose_name_plural = "processes"
        indexes = [
            due_index("process"),
            models.Index(fields=["crawl", "status"], name="process_crawl_status"),
        ]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.status})"

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_PROCESS

    def counts_shown(self) -> tuple[str, str]:
        """Its pages done and size as people see them: "-" while it runs (they are recorded
        when the session ends)."""
        if self.is_live:
            return "-", "-"
        return str(self.pages_done), human_size(self.size_bytes)

    # Runner transitions, each from the states it may leave, saving only what it changes.

    def _update(self, allowed, **fields) -> bool:
        if not Process.objects.filter(pk=self.pk, status__in=allowed).update(**fields):
            return False
        for name, value in fields.items():
            setattr(self, name, value)
        return True

    def mark_running(self, now, *, ref: str = "", pid: int | None = None, image: str = "",
                     args=(), runner: str = "", launcher: str = "", done: int | None = None) -> bool:
        """Launched (or found running after a crash cut its launch short); `done` is the
        crawl's pages done then, the base of the session's count if it keeps no archive."""
        fields = {"status": ProcessStatus.RUNNING, "retry_at": None,
                  "started_at": self.started_at or now, "counted_until": self.counted_until or now}
        if self.done_at_start is None and done is not None:
            fields["done_at_start"] = done
        fields.update({k: v for k, v in (("container_id", ref), ("pid", pid), ("image", image),
                                          ("args", list(args)), ("runner", runner),
                                          ("launcher", launcher)) if v})
        return self._update(LIVE_PROCESS, **fields)

    def mark_exited(self, code: int, reason: str, log_tail: str, now) -> bool:
        return self._update(LIVE_PROCESS, status=ProcessStatus.EXITED, exit_code=code,
                            exit_reason=reason, log_tail=log_tail[-4000:], ended_at=now, retry_at=None)

    def mark_lost(self, reason: str, log_tail: str, now) -> bool:
        """Vanished without an exit status (or never started): `reason` says whether that
        counts as a failure of the instance (crash) or not (its runner died, the engine...)."""
        return self._update(LIVE_PROCESS, status=ProcessStatus.LOST, exit_reason=reason,
                            log_tail=log_tail[-4000:], started_at=self.started_at or now,
                            ended_at=now, retry_at=None)

    def ran_alone(self) -> bool:
        """No other instance of its crawl ran while this one has (it is ending now)."""
        others = Process.objects.filter(crawl_id=self.crawl_id, started_at__isnull=False).exclude(pk=self.pk)
        if self.started_at is not None:
            others = others.filter(Q(ended_at__isnull=True) | Q(ended_at__gt=self.started_at))
        return not others.exists()

    def record_counts(self, pages: int, size: int) -> None:
        """What this session archived (pages) and the bytes kept for it, once it ended."""
        Process.objects.filter(pk=self.pk).update(pages_done=pages, size_bytes=size)
        self.pages_done, self.size_bytes = pages, size

    def mark_counted(self, until: dt.datetime) -> bool:
        """Its running time is counted up to `until`; guarded on the old mark, so when two
        callers count the same span only one wins (crawls.quotas.count_process_time)."""
        if not Process.objects.filter(pk=self.pk, counted_until=self.counted_until).update(
                counted_until=until):
            return False
        self.counted_until = until
        return True

    def mark_removed(self, now) -> bool:
        """Stopped and removed by archiver (cancel, pause, stall restart, scale-down)."""
        return self._update(LIVE_PROCESS, status=ProcessStatus.EXITED,
                            exit_reason=ExitReason.REMOVED, ended_at=now, retry_at=None)

    def defer(self, retry_at) -> bool:
        """Launch it later (backoff, an engine away): only a row not launched yet."""
        if not Process.objects.filter(pk=self.pk, started_at__isnull=True,
                                      status=ProcessStatus.STARTING).update(retry_at=retry_at):
            return False
        self.retry_at = retry_at
        return True

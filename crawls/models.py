"""archiver's data: orgs, crawls and what they produce, and the rules of their lifecycle.

Commands and the admin write intent into these rows; the runner reads due rows and writes
back what happened. Every state change is a guarded UPDATE ("set X only from Y", and for
the runner only with its lease token), so two actors can never both finish a crawl.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import IntegrityError, models, transaction
from django.db.models import F, Q, Sum
from django.utils import timezone

from archiver import conf
from archiver.errors import ConfigError, NotAllowed
from crawls.config import MAX_SEEDS, CrawlConfig, check_regex, crawlable, human_size
from crawls.lease import FAR_FUTURE, Leased, LeaseQuerySet, due_by_creation_index, due_index
from crawls.validation import quota_validators, validate_tags

if TYPE_CHECKING:
    from crawls.quotas import OrgUsageNow

MAX_SCALE = 8  # crawler instances per crawl, as CrawlConfig.scale allows
MAX_STALLS = 3  # a crawl that stalls this often fails with stop reason `stalled`
DISK_PAUSE = "paused: disk"  # waiting_reason of crawls the runner paused for disk space
# What the runner may write through Crawl.record_progress (counters and what it shows).
PROGRESS_FIELDS = frozenset({"pages_found", "pages_done", "pages_failed", "size_bytes",
                             "progress_at", "waiting_reason"})


def new_id() -> str:
    return uuid.uuid4().hex


def month_start(now: dt.datetime) -> dt.date:
    return now.date().replace(day=1)


def first_text(values) -> str:
    """The first string of a stored JSON list; "" if there is none or the JSON is damaged."""
    first = values[0] if isinstance(values, list) and values else ""
    return first if isinstance(first, str) else ""


class Org(models.Model):
    """The owner of crawls, and of the quotas they share. Empty quota = unlimited."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200, blank=True)
    # 1 up, never 0 (crawls.validation.OrgInput): what the CLI, admin and API accept alike.
    max_concurrent_crawls = models.PositiveIntegerField(
        null=True, blank=True, validators=quota_validators("max_concurrent_crawls"))
    storage_quota_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, validators=quota_validators("storage_quota_bytes"))
    exec_minutes_quota = models.PositiveIntegerField(
        null=True, blank=True, help_text="Crawler execution minutes per calendar month.",
        validators=quota_validators("exec_minutes_quota"),
    )
    max_pages_per_crawl = models.PositiveIntegerField(
        null=True, blank=True, validators=quota_validators("max_pages_per_crawl"))
    bytes_stored = models.PositiveBigIntegerField(default=0, help_text="Bytes of archive files kept.")
    created_at = models.DateTimeField(default=timezone.now)

    QUOTA_FIELDS = ("max_concurrent_crawls", "storage_quota_bytes", "exec_minutes_quota", "max_pages_per_crawl")

    class Meta:
        ordering = ["slug"]
        # Quotas bound what an org may cost: `change_org` (name) does not include them.
        permissions = [("change_org_quotas", "Can change an org's quotas")]

    def __str__(self) -> str:
        return self.slug

    def active_crawls(self):
        return self.crawls.filter(status__in=CrawlStatus.RUNNING_STATES)

    def exec_seconds_in_month(self, now: dt.datetime) -> float:
        usage = self.usage.filter(month=month_start(now)).first()
        return usage.exec_seconds if usage else 0.0

    def org_limit_reached(self, running: int) -> bool:
        return self.max_concurrent_crawls is not None and running >= self.max_concurrent_crawls

    def storage_quota_reached(self, extra_bytes: int = 0) -> bool:
        """Full when kept bytes plus `extra_bytes` (active crawls' in progress) reach the quota."""
        return (
            self.storage_quota_bytes is not None
            and self.bytes_stored + extra_bytes >= self.storage_quota_bytes
        )

    def exec_quota_reached(self, now: dt.datetime, extra_seconds: float = 0) -> bool:
        return (
            self.exec_minutes_quota is not None
            and self.exec_seconds_in_month(now) + extra_seconds >= self.exec_minutes_quota * 60
        )

    def add_exec_seconds(self, now: dt.datetime, seconds: float) -> None:
        usage, _ = OrgUsage.objects.get_or_create(org=self, month=month_start(now))
        OrgUsage.objects.filter(pk=usage.pk).update(exec_seconds=F("exec_seconds") + seconds)

    def add_bytes(self, delta: int) -> None:
        Org.objects.filter(pk=self.pk).update(bytes_stored=models.functions.Greatest(F("bytes_stored") + delta, 0))


class OrgUsage(models.Model):
    """Execution time an org used in one calendar month (UTC)."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="usage")
    month = models.DateField(help_text="First day of the month.")
    exec_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "month"], name="orgusage_once_per_month")]


class CrawlStatus(models.TextChoices):
    QUEUED = "queued"  # waiting for a runner to claim it
    STARTING = "starting"  # claimed; its instances are being launched
    WAITING_CAPACITY = "waiting_capacity"  # no room on the host, or engine/Redis unavailable
    WAITING_ORG_LIMIT = "waiting_org_limit"  # its org already runs its maximum of crawls
    RUNNING = "running"  # instances are crawling
    PENDING_WAIT = "pending_wait"  # some instances finished, waiting for the others
    GENERATE_WACZ = "generate_wacz"  # instances are packaging their archives
    PAUSED = "paused"  # interrupted on request; its queue is kept for resume
    COMPLETE = "complete"  # finished with every page it found done
    STOPPED_BY_USER = "stopped_by_user"  # stopped gracefully on request, archive kept
    STOPPED_QUOTA_REACHED = "stopped_quota_reached"  # org storage or execution quota reached
    STOPPED_TIME_LIMIT = "stopped_time_limit"  # its running-time limit was reached
    STOPPED_SIZE_LIMIT = "stopped_size_limit"  # its size limit was reached
    STOPPED_PAGE_LIMIT = "stopped_page_limit"  # its page limit was reached
    STOPPED_PAUSE_LIMIT = "stopped_pause_limit"  # it stayed paused longer than allowed
    SKIPPED_QUOTA_REACHED = "skipped_quota_reached"  # never started: storage quota was full
    FAILED = "failed"  # no page could be archived, or a permanent error
    CANCELED = "canceled"  # canceled on request, partial files discarded


S = CrawlStatus
S.NOT_STARTED = (S.QUEUED, S.WAITING_CAPACITY, S.WAITING_ORG_LIMIT)
S.RUNNING_STATES = (S.STARTING, S.RUNNING, S.PENDING_WAIT, S.GENERATE_WACZ)
S.ACTIVE = (*S.NOT_STARTED, *S.RUNNING_STATES, S.PAUSED)
S.FINAL = (
    S.COMPLETE, S.STOPPED_BY_USER, S.STOPPED_QUOTA_REACHED, S.STOPPED_TIME_LIMIT,
    S.STOPPED_SIZE_LIMIT, S.STOPPED_PAGE_LIMIT, S.STOPPED_PAUSE_LIMIT,
    S.SKIPPED_QUOTA_REACHED, S.FAILED, S.CANCELED,
)
S.SUCCESSFUL = (
    S.COMPLETE, S.STOPPED_BY_USER, S.STOPPED_QUOTA_REACHED, S.STOPPED_TIME_LIMIT,
    S.STOPPED_SIZE_LIMIT, S.STOPPED_PAGE_LIMIT, S.STOPPED_PAUSE_LIMIT,
)


class StopReason(models.TextChoices):
    USER = "user"
    TIME_LIMIT = "time_limit"
    SIZE_LIMIT = "size_limit"
    PAGE_LIMIT = "page_limit"
    STORAGE_QUOTA = "storage_quota"
    EXEC_QUOTA = "exec_quota"
    PAUSE_LIMIT = "pause_limit"
    STALLED = "stalled"
    REDIS_BUDGET = "redis_budget"  # its Redis database held more than ARCHIVER_CRAWL_REDIS_MAX_BYTES


STOPPED_STATE = {
    StopReason.USER: S.STOPPED_BY_USER,
    StopReason.TIME_LIMIT: S.STOPPED_TIME_LIMIT,
    StopReason.SIZE_LIMIT: S.STOPPED_SIZE_LIMIT,
    StopReason.PAGE_LIMIT: S.STOPPED_PAGE_LIMIT,
    StopReason.STORAGE_QUOTA: S.STOPPED_QUOTA_REACHED,
    StopReason.EXEC_QUOTA: S.STOPPED_QUOTA_REACHED,
    StopReason.PAUSE_LIMIT: S.STOPPED_PAUSE_LIMIT,
    StopReason.REDIS_BUDGET: S.STOPPED_SIZE_LIMIT,
}


class Intent(models.TextChoices):
    NONE = "", "none"
    PAUSE = "pause"
    STOP = "stop"
    CANCEL = "cancel"


EVENT_FOR_FINAL = {
    S.COMPLETE: "crawl.completed",
    S.FAILED: "crawl.failed",
    S.CANCELED: "crawl.canceled",
    S.SKIPPED_QUOTA_REACHED: "crawl.quota_reached",
    S.STOPPED_QUOTA_REACHED: "crawl.quota_reached",
}


class CrawlQuerySet(LeaseQuerySet):
    def with_running_processes(self):
        """Each crawl's running Process rows in one query (`running_processes`), so a list
        shows every crawl's running time (elapsed_now) without a query per crawl."""
        running = Process.objects.filter(status=ProcessStatus.RUNNING)
        return self.prefetch_related(models.Prefetch("processes", queryset=running,
                                                     to_attr="running_processes"))

    def active(self):
        return self.filter(status__in=S.ACTIVE)

    def running(self):
        return self.filter(status__in=S.RUNNING_STATES)

    def not_started(self):
        return self.filter(status__in=S.NOT_STARTED)

    def adoptable(self):
        """Crawls a runner may take over when their lease expired: they already have a runtime."""
        return self.filter(Q(status__in=S.RUNNING_STATES) | Q(status=S.PAUSED)
                           | Q(status=S.WAITING_CAPACITY, started_at__isnull=False))

    def paused_for_disk(self):
        return self.filter(status=S.PAUSED, waiting_reason__startswith=DISK_PAUSE)

    def holding_redis(self):
        """Crawls holding a Redis database, through the partial unique index on redis_db
        (unordered: the default newest-first order made SQLite scan every crawl instead)."""
        return self.filter(redis_db__isnull=False).order_by()

    def final_holding_redis(self, finished_before):
        """Final crawls whose Redis database was not flushed and released (a crash between).
        Looked up through the few crawls holding a database (the partial unique index),
        never through the finished ones, which grow without bound."""
        holders = self.holding_redis().values_list("pk", "status", "finished_at")
        stuck = [pk for pk, status, finished in holders
                 if status in S.FINAL and finished is not None and finished < finished_before]
        return self.filter(pk__in=stuck)

    def by_prefix(self, prefix: str) -> Crawl:
        """The one crawl whose id starts with `prefix`; NotAllowed names the problem."""
        prefix = prefix.strip().lower()
        if not prefix or not all(c in "0123456789abcdef" for c in prefix):
            raise NotAllowed(f"{prefix!r} is not a crawl id (ids are hexadecimal)")
        matches = list(self.filter(id__startswith=prefix)[:2])
        if not matches:
            raise NotAllowed(f"no crawl with id {prefix!r}")
        if len(matches) > 1:
            raise NotAllowed(f"crawl id {prefix!r} is ambiguous: give more characters")
        return matches[0]


class Crawl(Leased):
    """One crawl of a set of seeds, from queued to a final state."""

    id = models.CharField(primary_key=True, max_length=32, default=new_id, editable=False)
    org = models.ForeignKey(Org, on_delete=models.PROTECT, related_name="crawls")
    schedule = models.ForeignKey(
        "Schedule", null=True, blank=True, on_delete=models.SET_NULL, related_name="crawls"
    )
    seeds = models.JSONField(help_text="The URLs the crawl starts from.")
    config = models.JSONField(help_text="The validated CrawlConfig.")
    config_override = models.JSONField(
        default=dict, blank=True,
        help_text="CrawlConfig fields this session replaces (a retry of failed pages).",
    )
    tags = models.JSONField(default=list, blank=True, validators=[validate_tags])

    status = models.CharField(max_length=32, choices=CrawlStatus.choices, default=S.QUEUED, db_index=True)
    intent = models.CharField(
        max_length=16, choices=Intent.choices, blank=True, default="",
        help_text="What a user asked for that the runner has not carried out yet.",
    )
    stop_reason = models.CharField(max_length=32, choices=StopReason.choices, blank=True, default="")
    waiting_reason = models.CharField(max_length=300, blank=True, default="")
    error = models.TextField(blank=True, default="", help_text="Why it failed, for people.")

    pages_found = models.PositiveIntegerField(default=0)
    pages_done = models.PositiveIntegerField(default=0)
    pages_failed = models.PositiveIntegerField(default=0)
    size_bytes = models.PositiveBigIntegerField(default=0, help_text="Kept files plus bytes in progress.")
    exec_seconds = models.FloatField(default=0, help_text="Sum of its instances' running time.")
    elapsed_seconds = models.FloatField(default=0, help_text="Running time, pauses and waits excluded.")
    attempts = models.PositiveIntegerField(default=1)
    stalls = models.PositiveIntegerField(default=0)
    scale = models.PositiveSmallIntegerField(default=1, help_text="Instances it should run now.")
    redis_db = models.PositiveSmallIntegerField(null=True, blank=True, help_text="Held while active.")
    home_runner = models.CharField(
        max_length=64, blank=True, default="", help_text="Runner that launched its instances."
    )
    home_dir = models.CharField(
        max_length=500, blank=True, default="", help_text="Data dir holding its instances and files."
    )

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    progress_at = models.DateTimeField(null=True, blank=True, help_text="Last time a page was done.")
    log_bytes = models.PositiveBigIntegerField(default=0, help_text="Bytes of log lines kept (bounded).")

    objects = CrawlQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            due_index("crawl"),
            due_by_creation_index("crawl"),  # the runner takes new crawls oldest-created first
            models.Index(fields=["org", "status"], name="crawl_org_status"),
            models.Index(fields=["finished_at"], name="crawl_finished",
                         condition=Q(finished_at__isnull=False)),
            # The API's lists, newest first by (created_at, id) keyset, all or of one status.
            models.Index(fields=["created_at", "id"], name="crawl_created_id"),
            models.Index(fields=["status", "created_at", "id"], name="crawl_status_created_id"),
        ]
        constraints = [
            # A Redis database is won, never assumed: two runners cannot both hold one.
            models.UniqueConstraint(fields=["redis_db"], name="crawl_redis_db_once",
                                    condition=Q(redis_db__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.short_id} {first_text(self.seeds)}"

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @property
    def crawl_config(self) -> CrawlConfig:
        return CrawlConfig(**self.config)

    @property
    def is_final(self) -> bool:
        return self.status in S.FINAL

    @property
    def has_runtime(self) -> bool:
        """Whether Redis state or containers may exist for it (it was started once)."""
        return self.started_at is not None or self.redis_db is not None

    def size_human(self) -> str:
        return human_size(self.size_bytes)

    # --- creation --------------------------------------------------------------------

    @classmethod
    def create(cls, org: Org, config: CrawlConfig, tags=(), schedule=None, now=None) -> Crawl:
        """Queue a new crawl; ConfigError if it names a browser profile its org lacks."""
        now = now or timezone.now()
        BrowserProfile.require(org, config.profile)
        with transaction.atomic():
            crawl = cls.objects.create(
                org=org, seeds=config.seeds, config=config.model_dump(mode="json"),
                tags=list(tags), schedule=schedule, scale=config.scale,
                status=S.QUEUED, retry_at=now, created_at=now, updated_at=now,
            )
            crawl.emit("crawl.queued", now)
        return crawl

    # --- limits ----------------------------------------------------------------------

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
        rows = Crawl.objects.filter(pk=self.pk, lease_token=token, status=S.RUNNING, stalls=self.stalls)
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
        rows = Crawl.objects.filter(pk=self.pk, lease_token=token, status__in=S.RUNNING_STATES,
                                    stop_reason="").exclude(intent=Intent.CANCEL)
        if not rows.update(stop_reason=reason, intent=Intent.STOP, updated_at=now):
            return False
        self.stop_reason, self.intent, self.updated_at = reason, Intent.STOP, now
        return True

    def set_scale(self, scale: int, now: dt.datetime) -> None:
        """Ask for `scale` instances; the runner launches or stops instances to match."""
        if not 1 <= scale <= MAX_SCALE:
            raise NotAllowed(f"scale must be from 1 to {MAX_SCALE}, not {scale}")
        if not Crawl.objects.filter(pk=self.pk, status__in=S.ACTIVE).update(scale=scale, updated_at=now):
            raise self._refuse("scale")
        self.scale = scale

    def change_exclusion(self, regex: str, now: dt.datetime, *, remove: bool = False) -> None:
        """Add (or remove) an exclusion: kept in its config, and sent live to running instances."""
        check_regex(regex)
        with transaction.atomic():
            crawl = Crawl.objects.select_for_update().filter(pk=self.pk, status__in=S.ACTIVE).first()
            if crawl is None:
                raise self._refuse("change the exclusions of")
            excludes = list(crawl.config.get("exclude", []))
            if remove and regex not in excludes:
                raise NotAllowed(f"crawl {self.short_id} has no exclusion {regex!r}")
            if not remove and regex in excludes:
                raise NotAllowed(f"crawl {self.short_id} already excludes {regex!r}")
            excludes = [rx for rx in excludes if rx != regex] if remove else [*excludes, regex]
            self.config = {**crawl.config, "exclude": excludes}
            Crawl.objects.filter(pk=self.pk).update(config=self.config, updated_at=now)
            if crawl.has_runtime:
                kind = "removeExclusion" if remove else "addExclusion"
                CrawlMessage.objects.create(crawl=self, payload={"type": kind, "regex": regex},
                                            created_at=now)

    def unsent_messages(self):
        return self.messages.filter(sent_at__isnull=True).order_by("id")

    def launch_config(self) -> CrawlConfig:
        """What this session crawls: its config, with a failed-pages override applied."""
        return CrawlConfig(**{**self.config, **self.config_override})

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
            }
            if not self._transition(
                S.QUEUED, (*S.SUCCESSFUL, S.FAILED), now, event="crawl.queued",
                config_override=override, attempts=self.attempts + 1, retry_at=now,
                lease_owner="", intent="", stop_reason="", error="", waiting_reason="",
                finished_at=None, redis_db=None, stalls=0, progress_at=None, pages_failed=0,
            ):
                raise self._refuse("retry the failed pages of")
            self.failed_pages().update(status=SnapshotStatus.QUEUED, error="")
        return len(urls)

    # --- transitions -----------------------------------------------------------------

    def _transition(self, to: str, allowed, now, *, token: int | None = None,
                    event: str | None = None, **fields) -> bool:
        """Set status `to` only from `allowed` (and with our token); False if refused."""
        fields = {"status": to, "updated_at": now, **fields}
        fence = token is None and "lease_owner" in fields
        with transaction.atomic():
            rows = Crawl.objects.filter(pk=self.pk, status__in=allowed)
            if token is not None:
                rows = rows.filter(lease_token=token)
            # A user transition takes the row from any runner holding it: bump the fencing
            # token, so that runner's renew/release cannot overwrite our retry_at.
            if not rows.update(**fields, **({"lease_token": F("lease_token") + 1} if fence else {})):
                return False
            for name, value in fields.items():
                setattr(self, name, value)
            if fence:
                self.refresh_from_db(fields=["lease_token"])
            if event:
                self.emit(event, now)
        return True

    def _refuse(self, action: str) -> NotAllowed:
        self.refresh_from_db()
        return NotAllowed(f"cannot {action} crawl {self.short_id}: it is {self.status}")

    def emit(self, name: str, now: dt.datetime) -> None:
        """Record an event (and its webhook deliveries) in the caller's transaction."""
        CrawlEvent.record(self, name, now)

    # User intents: at once where no runtime exists, else recorded for the runner.

    def pause(self, now: dt.datetime) -> None:
        limit = conf.get().pause_limit
        if self._transition(S.PAUSED, S.NOT_STARTED, now, event="crawl.paused",
                            paused_at=now, intent="", waiting_reason="",
                            retry_at=now + dt.timedelta(seconds=limit), lease_owner=""):
            return
        # Paused by the runner for a full disk: from now on paused by a person, so it is
        # not resumed on its own when space returns.
        if Crawl.objects.filter(pk=self.pk, status=S.PAUSED, waiting_reason__startswith="paused: ").update(
                waiting_reason="", updated_at=now):
            self.waiting_reason = ""
            return
        if not Crawl.objects.filter(pk=self.pk, status__in=S.RUNNING_STATES).update(intent=Intent.PAUSE):
            raise self._refuse("pause")
        self.intent = Intent.PAUSE

    def resume(self, now: dt.datetime) -> None:
        if self._transition(S.QUEUED, [S.PAUSED], now, event="crawl.resumed", intent="",
                            paused_at=None, retry_at=now, lease_owner="", waiting_reason=""):
            return
        # A pause the runner has not carried out yet is simply withdrawn.
        if not Crawl.objects.filter(pk=self.pk, status__in=S.RUNNING_STATES,
                                    intent=Intent.PAUSE).update(intent=""):
            raise self._refuse("resume")
        self.intent = ""

    def stop(self, now: dt.datetime) -> None:
        self._end_on_request(Intent.STOP, now)

    def cancel(self, now: dt.datetime) -> None:
        self._end_on_request(Intent.CANCEL, now)

    def _end_on_request(self, intent: str, now: dt.datetime) -> None:
        """A crawl that never started ends canceled at once; others are ended by the runner."""
        if not self.has_runtime and self._transition(
            S.CANCELED, S.NOT_STARTED, now, event="crawl.canceled", intent="",
            stop_reason=StopReason.USER, finished_at=now, retry_at=None, lease_owner="",
            waiting_reason="",
        ):
            return
        # A paused crawl holds no lease: make it due so a runner finishes it now.
        if Crawl.objects.filter(pk=self.pk, status=S.PAUSED).update(intent=intent, retry_at=now):
            self.intent = intent
            return
        if not Crawl.objects.filter(pk=self.pk, status__in=(*S.RUNNING_STATES, *S.NOT_STARTED)).update(intent=intent):
            raise self._refuse(intent)
        self.intent = intent

    def retry(self, now: dt.datetime) -> None:
        """Queue a failed or canceled crawl again, as a new attempt with fresh progress."""
        if not self._transition(
            S.QUEUED, [S.FAILED, S.CANCELED], now, event="crawl.queued",
            attempts=self.attempts + 1, retry_at=now, lease_owner="", intent="",
            stop_reason="", error="", waiting_reason="", finished_at=None, started_at=None,
            pages_found=0, pages_done=0, pages_failed=0, elapsed_seconds=0, stalls=0,
            redis_db=None, progress_at=None, config_override={},
        ):
            raise self._refuse("retry")

    # Runner transitions: guarded by the lease token too.

    def record_progress(self, token: int, now, **fields) -> bool:
        """Write what the runner observed (counters, progress time, waiting reason) with our
        token; only PROGRESS_FIELDS, so this can never move the crawl's state."""
        unknown = set(fields) - PROGRESS_FIELDS
        assert not unknown, f"record_progress cannot write {sorted(unknown)}"
        if not Crawl.objects.filter(pk=self.pk, lease_token=token).update(**fields, updated_at=now):
            return False
        for name, value in fields.items():
            setattr(self, name, value)
        return True

    def take_redis_db(self, db: int, token: int) -> bool:
        """Win Redis database `db` for this crawl; False if another crawl holds it (the unique
        index refuses the second holder) or our lease moved."""
        try:
            with transaction.atomic():
                won = Crawl.objects.filter(pk=self.pk, lease_token=token, redis_db=None).update(redis_db=db)
        except IntegrityError:
            return False
        if won:
            self.redis_db = db
        return bool(won)

    def set_home(self, runner_id: str, data_dir: str, token: int) -> bool:
        """Record which runner and data dir hold this crawl's instances and files from now on."""
        if not Crawl.objects.filter(pk=self.pk, lease_token=token).update(
                home_runner=runner_id, home_dir=data_dir):
            return False
        self.home_runner, self.home_dir = runner_id, data_dir
        return True

    def request_disk_pause(self, reason: str, token: int, now) -> bool:
        """Pause a running crawl for a full disk; the reason (DISK_PAUSE...) tells it from a
        pause a person asked for, and lets the runner resume it when space returns."""
        rows = Crawl.objects.filter(pk=self.pk, lease_token=token, status__in=S.RUNNING_STATES,
                                    intent="")
        if not rows.update(intent=Intent.PAUSE, waiting_reason=reason[:300], updated_at=now):
            return False
        self.intent, self.waiting_reason = Intent.PAUSE, reason[:300]
        return True

    def record_user_stop(self, token: int, now) -> bool:
        """A stop a person asked for becomes the crawl's stop reason (the first one stays)."""
        if not Crawl.objects.filter(pk=self.pk, lease_token=token, stop_reason="").update(
                stop_reason=StopReason.USER, updated_at=now):
            return False
        self.stop_reason = StopReason.USER
        return True

    def mark_waiting(self, status: str, reason: str, token: int, now) -> bool:
        allowed = (*S.NOT_STARTED, S.STARTING, S.RUNNING)
        return self._transition(status, allowed, now, token=token, waiting_reason=reason)

    def mark_starting(self, token: int, now) -> bool:
        # Each session starts the stall clock afresh: time paused or queued is not a stall.
        return self._transition(S.STARTING, (*S.NOT_STARTED, S.RUNNING), now, token=token,
                                waiting_reason="", progress_at=now)

    def mark_running(self, token: int, now) -> bool:
        first = self.started_at is None
        return self._transition(
            S.RUNNING, (S.STARTING, S.WAITING_CAPACITY, S.PENDING_WAIT, S.GENERATE_WACZ), now,
            token=token, event="crawl.started" if first else None,
            started_at=self.started_at or now, waiting_reason="",
        )

    def mark_finishing(self, status: str, token: int, now) -> bool:
        return self._transition(status, S.RUNNING_STATES, now, token=token)

    def mark_paused(self, token: int, now, reason: str = "") -> bool:
        limit = conf.get().pause_limit
        return self._transition(
            S.PAUSED, (*S.RUNNING_STATES, S.WAITING_CAPACITY), now, token=token,
            event="crawl.paused", intent="", paused_at=now, waiting_reason=reason,
            retry_at=now + dt.timedelta(seconds=limit), lease_owner="",
        )

    def finish(self, status: str, token: int, now, *, stop_reason: str = "", error: str = "") -> bool:
        """Move to a final state; the row leaves every queue (retry_at = NULL).

        It keeps its Redis database until the runner has flushed it (`release_redis_db`):
        released first, it could be won and filled by another crawl before our flush.
        """
        assert status in S.FINAL, status
        event = EVENT_FOR_FINAL.get(status, "crawl.stopped")
        return self._transition(
            status, S.ACTIVE, now, token=token, event=event, stop_reason=stop_reason,
            error=error, finished_at=now, retry_at=None, lease_owner="", intent="",
            waiting_reason="",
        )

    def release_redis_db(self, db: int) -> bool:
        """A final crawl gives its (flushed) Redis database back."""
        released = Crawl.objects.filter(pk=self.pk, redis_db=db, status__in=S.FINAL).update(redis_db=None)
        if released:
            self.redis_db = None
        return bool(released)

    def reconfigure(self, org: Org, config: CrawlConfig, tags, now: dt.datetime) -> None:
        """Change the org, configuration and tags of a crawl that has not started yet.

        The lease token moves on, so a runner that claimed it with the old configuration
        cannot start it (its guarded updates fail) and reads it again.
        """
        BrowserProfile.require(org, config.profile)
        fields = {"org": org, "seeds": config.seeds, "config": config.model_dump(mode="json"),
                  "tags": list(tags), "scale": config.scale, "updated_at": now, "retry_at": now,
                  "lease_owner": ""}
        rows = Crawl.objects.filter(pk=self.pk, status__in=S.NOT_STARTED, started_at__isnull=True,
                                    redis_db__isnull=True)
        if not rows.update(**fields, lease_token=F("lease_token") + 1):
            raise self._refuse("edit")
        for name, value in fields.items():
            setattr(self, name, value)

    # --- payloads --------------------------------------------------------------------

    def summary(self, now: dt.datetime | None = None) -> dict:
        """The crawl as other systems see it (status --json, the API, webhook payloads); with
        `now`, its running time includes what is not counted yet (elapsed_now)."""
        return {
            "id": self.id,
            "org": self.org.slug,
            "status": self.status,
            "stop_reason": self.stop_reason or None,
            "waiting_reason": self.waiting_reason or None,
            "error": self.error or None,
            "seeds": self.seeds,
            "tags": self.tags,
            "pages_found": self.pages_found,
            "pages_done": self.pages_done,
            "pages_failed": self.pages_failed,
            "size_bytes": self.size_bytes,
            "exec_seconds": round(self.exec_seconds, 3),
            "elapsed_seconds": round(self.elapsed_now(now) if now else self.elapsed_seconds, 3),
            "attempts": self.attempts,
            "scale": self.scale,
            "files": [f.summary() for f in self.files.all()],
            "created_at": _iso(self.created_at),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
        }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


class SnapshotStatus(models.TextChoices):
    QUEUED = "queued"  # to be crawled again (retry of failed pages)
    DONE = "done"  # archived
    FAILED = "failed"  # the crawler gave up on it


PAGE_LOADED = 2  # browsertrix-crawler's loadState FULL_PAGE_LOADED (0 failed, 1 content loaded)


def page_loaded(record: dict) -> bool:
    """Whether a crawler's page record (from `<id>:pages`, or a WACZ's page list) is a page it
    archived. The real crawler also reports a page whose retries ran out there, with no HTTP
    status and a loadState below 2: that page failed (docs/crawlers.md)."""
    status, state = record.get("status"), record.get("loadState")
    if type(status) is not int or not 0 < status < 1000:
        return False
    return not (type(state) is int and state < PAGE_LOADED)


class Snapshot(Leased):
    """One page of a crawl, as the crawler reported it."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="snapshots")
    url = models.TextField()
    depth = models.PositiveIntegerField(default=0)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    seed = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=SnapshotStatus.choices, default=SnapshotStatus.DONE)
    http_status = models.PositiveIntegerField(null=True, blank=True)
    load_state = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The crawler's loadState: below 2 the page did not load.")
    title = models.TextField(blank=True, default="")
    mime = models.CharField(max_length=200, blank=True, default="")
    captured_at = models.DateTimeField(null=True, blank=True)
    filename = models.CharField(max_length=300, blank=True, default="",
                                help_text="The kept archive holding it (set once its WACZ is kept).")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        ordering = ["crawl", "id"]
        indexes = [due_index("snapshot")]
        constraints = [models.UniqueConstraint(fields=["crawl", "url"], name="snapshot_url_once")]

    def __str__(self) -> str:
        return self.url


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

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="processes")
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


class CrawlFile(models.Model):
    """An archive file a crawl produced, kept under a data dir or in a bucket (docs/storage.md)."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=500, unique=True,
                            help_text="Relative to the data dir, or the object's key in the bucket.")
    root = models.CharField(
        max_length=500, blank=True, default="",
        help_text="The data dir holding it ('' = any runner's own), or s3://<bucket>.",
    )
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["crawl", "created_at"]

    def __str__(self) -> str:
        return self.path

    def summary(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


class CrawlLog(models.Model):
    """A log line of a crawl: the crawler's errors from Redis, and the runner's own notes."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="logs")
    created_at = models.DateTimeField(default=timezone.now)
    level = models.CharField(max_length=16, default="info")
    source = models.CharField(max_length=32, default="runner", help_text="runner, or crawler instance.")
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    size = models.PositiveIntegerField(default=0, help_text="Bytes it counts in the crawl's log budget.")

    class Meta:
        ordering = ["crawl", "id"]
        indexes = [models.Index(fields=["crawl", "id"], name="crawllog_crawl_id")]

    def __str__(self) -> str:
        return self.message[:80]


class CrawlMessage(models.Model):
    """A live control message for a crawl's running instances, until the runner sends it."""

    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="messages")
    payload = models.JSONField(help_text="JSON the runner RPUSHes to each instance's <hostname>:msg.")
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["crawl"], name="crawlmessage_unsent",
                                condition=Q(sent_at__isnull=True))]

    def __str__(self) -> str:
        return f"{self.payload.get('type')} {self.crawl_id[:8]}"

    def mark_sent(self, now: dt.datetime) -> bool:
        """Sent to every running instance; False if another runner marked it first."""
        if not CrawlMessage.objects.filter(pk=self.pk, sent_at__isnull=True).update(sent_at=now):
            return False
        self.sent_at = now
        return True


class CrawlEvent(models.Model):
    """A transition other systems hear about; written in the transition's transaction."""

    NAMES = (
        "crawl.queued", "crawl.started", "crawl.paused", "crawl.resumed", "crawl.completed",
        "crawl.stopped", "crawl.failed", "crawl.canceled", "crawl.quota_reached",
    )

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    crawl = models.ForeignKey(Crawl, on_delete=models.CASCADE, related_name="events")
    name = models.CharField(max_length=40, choices=[(n, n) for n in NAMES])
    created_at = models.DateTimeField(default=timezone.now)
    payload = models.JSONField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} {self.crawl_id[:8]}"

    @classmethod
    def record(cls, crawl: Crawl, name: str, now: dt.datetime) -> CrawlEvent:
        event = cls(crawl=crawl, name=name, created_at=now)
        event.payload = {
            "event": name,
            "event_id": str(event.event_id),
            "timestamp": _iso(now),
            "instance": conf.get().instance_id,
            "crawl": crawl.summary(),
        }
        event.save()
        deliveries = [
            WebhookDelivery(webhook=hook, event=event, retry_at=now, created_at=now)
            for hook in Webhook.objects.listening(name, crawl.org_id)
        ]
        WebhookDelivery.objects.bulk_create(deliveries)
        return event


class RunnerRecord(models.Model):
    """A runner daemon, alive while its heartbeat is fresh."""

    id = models.CharField(primary_key=True, max_length=64)
    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    data_dir = models.CharField(max_length=500)
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class Schedule(Leased):
    """A cron entry that creates a crawl from a stored configuration when due."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=100)
    config = models.JSONField()
    tags = models.JSONField(default=list, blank=True, validators=[validate_tags])
    enabled = models.BooleanField(default=True)
    last_crawl = models.ForeignKey(Crawl, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [due_index("schedule")]

    def __str__(self) -> str:
        return f"{self.cron} {first_text(self.stored_seeds)}"

    @property
    def stored_seeds(self) -> list[str]:
        """The seeds of its stored config; none if that JSON is damaged (not an object)."""
        return self.config.get("seeds") or [] if isinstance(self.config, dict) else []


class WebhookQuerySet(models.QuerySet):
    def listening(self, event: str, org_id: int):
        """Enabled webhooks of this org or global whose filter admits `event`."""
        hooks = self.filter(enabled=True).filter(Q(org_id=org_id) | Q(org__isnull=True))
        return [hook for hook in hooks if not hook.events or event in hook.events]


class Webhook(models.Model):
    """Where to POST crawl events. The secret is write-only: never shown, never logged."""

    url = models.URLField(max_length=2000)
    secret = models.CharField(max_length=500)
    events = models.JSONField(default=list, blank=True, help_text="Event names; empty = all.")
    org = models.ForeignKey(Org, null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return f"webhook {self.pk} → {parts.hostname}:{parts.port or 443}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for (another) attempt
    DELIVERING = "delivering"  # claimed by a deliverer right now
    SUCCEEDED = "succeeded"  # the receiver answered 2xx
    FAILED = "failed"  # dead letter: attempts exhausted or refused for good; can be replayed


DeliveryStatus.OPEN = (DeliveryStatus.PENDING, DeliveryStatus.DELIVERING)


class DeliveryQuerySet(LeaseQuerySet):
    def open(self):
        """Deliveries without an outcome yet: the only ones a deliverer may claim."""
        return self.filter(status__in=DeliveryStatus.OPEN)

    def counts(self) -> dict[str, int]:
        """Deliveries per status and in total; every delivery is in exactly one status."""
        counts = dict.fromkeys(DeliveryStatus.values, 0)
        for row in self.order_by().values("status").annotate(n=models.Count("pk")):
            counts[row["status"]] = row["n"]
        counts["total"] = sum(counts.values())
        return counts


class WebhookDelivery(Leased):
    """The outbox: one event to one webhook, until it ends in exactly one outcome."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.ForeignKey(CrawlEvent, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [due_index("delivery")]
        constraints = [models.UniqueConstraint(fields=["webhook", "event"], name="delivery_once")]

    def __str__(self) -> str:
        return f"{self.event.name} → webhook {self.webhook_id} ({self.status})"

    # Deliverer transitions, guarded by the lease token: a deliverer whose lease was
    # taken over changes nothing. Each saves only what it changes.

    def _update(self, token: int | None, allowed, **fields) -> bool:
        rows = WebhookDelivery.objects.filter(pk=self.pk, status__in=allowed)
        if token is not None:
            rows = rows.filter(lease_token=token)
        if not rows.update(**fields):
            return False
        for name, value in fields.items():
            if not hasattr(value, "resolve_expression"):
                setattr(self, name, value)
        return True

    def begin_attempt(self, token: int) -> bool:
        """Count the attempt before sending, so an attempt cut short by a crash is counted."""
        if not self._update(token, DeliveryStatus.OPEN, status=DeliveryStatus.DELIVERING,
                            attempts=F("attempts") + 1):
            return False
        self.attempts += 1
        return True

    def succeed(self, token: int, now: dt.datetime, status_code: int) -> bool:
        return self._update(token, [DeliveryStatus.DELIVERING], status=DeliveryStatus.SUCCEEDED,
                            last_status_code=status_code, last_error="", delivered_at=now,
                            retry_at=None, lease_owner="")

    def retry_later(self, token: int, retry_at: dt.datetime, status_code: int | None, error: str) -> bool:
        return self._update(token, [DeliveryStatus.DELIVERING], status=DeliveryStatus.PENDING,
                            last_status_code=status_code, last_error=error, retry_at=retry_at,
                            lease_owner="")

    def give_up(self, token: int, status_code: int | None, error: str) -> bool:
        """Dead-letter it: no more attempts until someone replays it."""
        return self._update(token, DeliveryStatus.OPEN, status=DeliveryStatus.FAILED,
                            last_status_code=status_code, last_error=error, retry_at=None,
                            lease_owner="")

    def replay(self, now: dt.datetime) -> None:
        """A failed delivery starts over: pending, due now, attempts reset, same event."""
        if not self._update(None, [DeliveryStatus.FAILED], status=DeliveryStatus.PENDING,
                            attempts=0, retry_at=now, lease_owner="", last_error=""):
            self.refresh_from_db(fields=["status"])
            raise NotAllowed(f"cannot replay delivery {self.pk}: it is {self.status}, not failed")


class LoginFailure(models.Model):
    """Failed admin log-ins for one (address, username) pair, to slow down password guessing."""

    key = models.CharField(max_length=64, unique=True, help_text="sha256 of address and username.")
    failures = models.PositiveIntegerField(default=0)
    first_at = models.DateTimeField(help_text="The first failure of the current window.")
    locked_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.failures} failures"


def storage_in_progress(org: Org) -> int:
    """Bytes that active crawls of `org` hold beyond their kept files."""
    files = CrawlFile.objects.filter(crawl__org=org, crawl__status__in=S.ACTIVE).aggregate(n=Sum("size"))["n"] or 0
    active = org.crawls.filter(status__in=S.ACTIVE).aggregate(n=Sum("size_bytes"))["n"] or 0
    return max(active - files, 0)


__all__ = [
    "FAR_FUTURE", "Crawl", "CrawlEvent", "CrawlMessage", "CrawlFile", "CrawlLog", "CrawlStatus", "DeliveryStatus",
    "ExitReason", "Intent", "LoginFailure", "Org", "OrgUsage", "Process", "ProcessStatus", "RunnerRecord",
    "Schedule", "Snapshot", "SnapshotStatus", "StopReason", "Webhook", "WebhookDelivery",
]


# --- the HTTP API's tokens (crawls/api) ------------------------------------------------------


class ApiTokenQuerySet(models.QuerySet):
    def usable(self):
        """Not revoked, and owned by an active user."""
        return self.filter(revoked_at__isnull=True, user__is_active=True)


class ApiToken(models.Model):
    """A secret a program sends as `Authorization: Bearer <token>`; stored hashed only.

    The token reads `arch_<prefix>_<secret>`: the prefix finds the row, the SHA-256 of the
    whole token must match `secret_hash`. Requests count in a fixed one-minute window
    (`window_start`, `window_count`) against `rate_limit` per minute.
    """

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the whole token, hex.")
    org = models.ForeignKey(Org, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens",
                            help_text="Only this org's crawls; empty = every org.")
    read_only = models.BooleanField(default=False)
    rate_limit = models.PositiveIntegerField(default=600, help_text="Requests per minute.")
    window_start = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user, name: str, *, org: Org | None = None, read_only: bool = False,
              rate_limit: int = 600, now: dt.datetime | None = None) -> tuple[ApiToken, str]:
        """A new token and its secret, which exists only in the return value."""
        token = cls(user=user, name=name, org=org, read_only=read_only, rate_limit=rate_limit,
                    created_at=now or timezone.now())
        secret = token.new_secret()
        token.save()
        return token, secret

    def new_secret(self) -> str:
        """Give this unsaved token a prefix and a secret; only the secret's hash is kept."""
        import hashlib
        import secrets

        self.prefix = secrets.token_hex(4)
        secret = f"arch_{self.prefix}_{secrets.token_urlsafe(32)}"
        self.secret_hash = hashlib.sha256(secret.encode()).hexdigest()
        return secret

    def revoke(self, now: dt.datetime) -> None:
        if not ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=now):
            raise NotAllowed(f"token {self.prefix} is already revoked")
        self.revoked_at = now

    def count_request(self, now: dt.datetime) -> float | None:
        """Count one request in this minute's window: None if allowed, else the seconds
        until the window ends (Retry-After). Two guarded UPDATEs, no read-modify-write."""
        window = now.replace(second=0, microsecond=0)
        rows = ApiToken.objects.filter(pk=self.pk)
        # Twice: a concurrent request may start this minute's window between our two UPDATEs
        # (then both missed, and the first one counts us the second time).
        for _ in range(2):
            if rows.filter(window_start=window, window_count__lt=self.rate_limit).update(
                    window_count=F("window_count") + 1, last_used_at=now):
                return None
            if rows.filter(Q(window_start__lt=window) | Q(window_start__isnull=True)).update(
                    window_start=window, window_count=1, last_used_at=now):
                return None
        return max((window + dt.timedelta(minutes=1) - now).total_seconds(), 1)


class IdempotencyKey(models.Model):
    """A POST /crawls retried with the same Idempotency-Key returns this first response."""

    user = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="+")
    token = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    body_sha256 = models.CharField(max_length=64)
    crawl = models.ForeignKey(Crawl, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status_code = models.PositiveSmallIntegerField()
    response = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["token", "key"], name="idempotency_per_token",
                                    condition=Q(token__isnull=False)),
            models.UniqueConstraint(fields=["user", "key"], name="idempotency_per_session_user",
                                    condition=Q(token__isnull=True)),
        ]

    def __str__(self) -> str:
        return self.key


class BrowserProfile(models.Model):
    """A logged-in browser's profile (a tar.gz, as browsertrix-crawler's --profile takes it),
    stored privately under the data dir (crawls/profiles.py) and used by name by an org's
    crawls. The row holds no secret: the file does."""

    org = models.ForeignKey(Org, on_delete=models.PROTECT, related_name="browser_profiles")
    name = models.CharField(max_length=64)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["org", "name"]
        constraints = [models.UniqueConstraint(fields=["org", "name"], name="browser_profile_name_per_org")]

    def __str__(self) -> str:
        return f"{self.org.slug}/{self.name}"

    @staticmethod
    def require(org: Org, name: str | None) -> None:
        """ConfigError unless `name` is None or a profile of `org` (what a new crawl needs)."""
        if name is not None and not BrowserProfile.objects.filter(org=org, name=name).exists():
            raise ConfigError(
                f"no browser profile {name!r} in org {org.slug!r} "
                f"(add it with: archiver profile add {name} FILE --org {org.slug})"
            )

    def users(self) -> list[str]:
        """What still needs this profile: the org's active crawls and schedules naming it."""
        crawls = Crawl.objects.filter(org=self.org, status__in=S.ACTIVE, config__profile=self.name)
        schedules = Schedule.objects.filter(org=self.org, config__profile=self.name)
        return ([f"crawl {crawl_id[:8]}" for crawl_id in crawls.values_list("pk", flat=True)[:5]]
                + [f"schedule {pk}" for pk in schedules.values_list("pk", flat=True)[:5]])

    def summary(self) -> dict:
        return {"org": self.org.slug, "name": self.name, "sha256": self.sha256,
                "size_bytes": self.size_bytes, "created_at": self.created_at.isoformat()}

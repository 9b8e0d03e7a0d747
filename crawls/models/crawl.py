"""The crawl: one crawl of a set of seeds, from queued to a final state, and its queues.

Commands and the admin write intent into these rows; the runner reads due rows and writes
back what happened. Every state change is a guarded UPDATE ("set X only from Y", and for
the runner only with its lease token), so two actors can never both finish a crawl. The
methods are grouped by concern in mixins: crawl_limits.py (limits and quotas),
crawl_intents.py (what people ask), crawl_runner.py (what the runner writes); this module
holds the fields, the queues and the one guarded transition they all use.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import models, transaction
from django.db.models import F, Q
from django.utils import timezone

from archiver.errors import NotAllowed
from crawls.config import CrawlConfig, human_size
from crawls.fields import validate_tags
from crawls.lease import Leased, LeaseQuerySet, due_by_creation_index, due_index
from crawls.models.crawl_intents import UserIntents
from crawls.models.crawl_limits import CrawlLimits
from crawls.models.crawl_runner import RunnerTransitions
from crawls.models.events import CrawlEvent, iso
from crawls.models.org import Org
from crawls.models.process import Process, ProcessStatus
from crawls.models.profiles import BrowserProfile
from crawls.models.statuses import (
    DISK_PAUSE,
    TRANSITIONS,
    CrawlOrigin,
    CrawlStatus,
    Intent,
    StopReason,
    said,
)

S = CrawlStatus


def new_id() -> str:
    return uuid.uuid4().hex


def first_text(values) -> str:
    """The first string of a stored JSON list; "" if there is none or the JSON is damaged."""
    first = values[0] if isinstance(values, list) and values else ""
    return first if isinstance(first, str) else ""


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

    # Writes to many crawls at once, only to those no runner holds: a claimed crawl is not
    # due (wait_for_capacity), and has its lease_owner set (wake_waiting_for_org).

    def wait_for_capacity(self, reason: str, now: dt.datetime) -> int:
        """Due unclaimed crawls that do not fit on the host say why; how many changed.

        Never started: they move to waiting_capacity. Crawls that ran before keep their state
        (a resumed crawl stays queued) and get the reason. Waiting states emit no event
        (as `mark_waiting`): webhooks hear of starts and ends, not of waits.
        """
        (to,), origins = TRANSITIONS["wait_for_capacity"]
        due = self.filter(status__in=origins).due(now).exclude(waiting_reason=reason)
        changed = due.filter(started_at__isnull=True).update(status=to,
                                                              waiting_reason=reason, updated_at=now)
        changed += due.filter(started_at__isnull=False).update(waiting_reason=reason, updated_at=now)
        return changed

    def wake_waiting_for_org(self, org_id: int, now: dt.datetime) -> int:
        """A crawl of the org stopped running: its unclaimed crawls waiting for the org's
        limit are due now, not after the retry delay (the claim keeps their age order)."""
        return self.filter(org_id=org_id, status=S.WAITING_ORG_LIMIT, lease_owner="").update(retry_at=now)

    # Counters that any holder adds to: an UPDATE with F(), so concurrent adds add up and
    # no state moves. The caller keeps its copy of the row in step.

    def add_exec_seconds(self, seconds: float) -> int:
        return self.update(exec_seconds=F("exec_seconds") + seconds)

    def add_elapsed_seconds(self, seconds: float) -> int:
        return self.update(elapsed_seconds=F("elapsed_seconds") + seconds)

    def add_log_bytes(self, delta: int) -> int:
        """Bytes of log lines kept (crawls/crawl_logs.py); negative when lines are trimmed."""
        return self.update(log_bytes=F("log_bytes") + delta)

    def clear_log_bytes(self) -> int:
        return self.update(log_bytes=0)


class Crawl(CrawlLimits, UserIntents, RunnerTransitions, Leased):
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
    error = models.TextField(blank=True, default="", help_text="Why it failed, for people: the cause first.")
    error_detail = models.TextField(
        blank=True, default="",
        help_text="Where its error came from (the instance, its exit code, the crawler's whole words).",
    )

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
    dedup_index_bytes = models.PositiveBigIntegerField(
        default=0, help_text="What the dedup index the runner handed its crawler takes in its Redis "
                             "database; allowed beyond ARCHIVER_CRAWL_REDIS_MAX_BYTES.")
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
    origin = models.CharField(
        max_length=16, choices=CrawlOrigin.choices, default=CrawlOrigin.CRAWL,
        help_text="Crawled by archiver, or archives made elsewhere and imported (never launched).")

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

    @property
    def dedup_enabled(self) -> bool:
        """Whether its crawler writes revisits for payloads the org kept (docs/storage.md)."""
        chosen = self.launch_config().dedup
        return self.schedule_id is not None if chosen is None else chosen

    def record_dedup_index(self, size: int) -> None:
        """What the dedup index handed to its crawler takes in its Redis (runner/launch.py):
        allowed beyond its Redis budget."""
        self.dedup_index_bytes = size
        Crawl.objects.filter(pk=self.pk).update(dedup_index_bytes=size)

    def launch_config(self) -> CrawlConfig:
        """What this session crawls: its config, with a failed-pages override applied."""
        return CrawlConfig(**{**self.config, **self.config_override})

    def last_complete_start(self, before: dt.datetime) -> dt.datetime | None:
        """When the last complete crawl of the same seeds in its org started before `before`
        (`--sitemap-since last`); None if there was none."""
        return (Crawl.objects.filter(org_id=self.org_id, seeds=self.seeds, status=S.COMPLETE,
                                     started_at__lt=before)
                .exclude(pk=self.pk).order_by("-started_at")
                .values_list("started_at", flat=True).first())

    def unsent_messages(self):
        return self.messages.filter(sent_at__isnull=True).order_by("id")

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

    # --- transitions -----------------------------------------------------------------

    def _transition(self, name: str, now, *, to: str | None = None, token: int | None = None,
                    event: str | None = None, **fields) -> bool:
        """Make transition `name` of TRANSITIONS, to status `to` (its only one if None), only
        from the states it may leave (and with our token); False if refused."""
        move = TRANSITIONS[name]
        if to is None:
            (to,) = move.to  # a transition to one of several states must name it
        assert to in move.to, (name, to)
        fields = {"status": to, "updated_at": now, **fields}
        fence = token is None and "lease_owner" in fields
        with transaction.atomic():
            rows = self._rows(status__in=move.origins)
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
        return NotAllowed(f"cannot {action} crawl {self.short_id}: {said(self.status)}")

    def emit(self, name: str, now: dt.datetime) -> None:
        """Record an event (and its webhook deliveries) in the caller's transaction."""
        CrawlEvent.record(self, name, now)

    def _rows(self, **filters) -> CrawlQuerySet:
        """This crawl's row with `filters`: the guard of a conditional UPDATE (the mixins')."""
        return Crawl.objects.filter(pk=self.pk, **filters)

    # --- payloads --------------------------------------------------------------------

    def summary(self, now: dt.datetime | None = None, *, files: list | None = None) -> dict:
        """The crawl as other systems see it (status --json, the API, webhook payloads); with
        `now`, its running time includes what is not counted yet (elapsed_now). `files`
        replaces the files' summaries (the API, which shows more of them, reads them once)."""
        return {
            "id": self.id,
            "org": self.org.slug,
            "status": self.status,
            "stop_reason": self.stop_reason or None,
            "waiting_reason": self.waiting_reason or None,
            "error": self.error or None,
            "error_detail": self.error_detail or None,
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
            "files": [f.summary() for f in self.files.all()] if files is None else files,
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
        }

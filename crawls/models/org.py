"""The org: the owner of crawls, its quotas and what it used (quotas as model methods)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db import models
from django.db.models import F, Sum
from django.utils import timezone

from crawls.fields import quota_validators
from crawls.models.statuses import CrawlStatus


def month_start(now: dt.datetime) -> dt.date:
    return now.date().replace(day=1)


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
        OrgUsage.add_exec_seconds(self.pk, month_start(now), seconds)

    def add_bytes(self, delta: int) -> None:
        Org.objects.filter(pk=self.pk).update(bytes_stored=models.functions.Greatest(F("bytes_stored") + delta, 0))


class OrgUsage(models.Model):
    """Execution time an org used in one calendar month (UTC)."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="usage")
    month = models.DateField(help_text="First day of the month.")
    exec_seconds = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "month"], name="orgusage_once_per_month")]

    @staticmethod
    def add_exec_seconds(org_id: int, month: dt.date, seconds: float) -> None:
        """Add to the month's row, created on first use; an UPDATE, so concurrent adds add up."""
        usage, _ = OrgUsage.objects.get_or_create(org_id=org_id, month=month)
        OrgUsage.objects.filter(pk=usage.pk).update(exec_seconds=F("exec_seconds") + seconds)


def storage_in_progress(org: Org) -> int:
    """Bytes that active crawls of `org` hold beyond their kept files."""
    active = org.crawls.filter(status__in=CrawlStatus.ACTIVE)
    files = active.aggregate(n=Sum("files__size"))["n"] or 0
    held = active.aggregate(n=Sum("size_bytes"))["n"] or 0
    return max(held - files, 0)


@dataclass(frozen=True)
class OrgUsageNow:
    """What an org uses now: kept bytes, bytes its active crawls hold, this month's exec time."""

    bytes_stored: int
    bytes_in_progress: int = 0
    exec_seconds: float = 0.0

    @property
    def storage_bytes(self) -> int:
        return self.bytes_stored + self.bytes_in_progress

    @classmethod
    def read(cls, org: Org, now: dt.datetime) -> OrgUsageNow:
        bytes_stored = Org.objects.values_list("bytes_stored", flat=True).get(pk=org.pk)
        return cls(
            bytes_stored=bytes_stored,
            bytes_in_progress=storage_in_progress(org),
            exec_seconds=org.exec_seconds_in_month(now),
        )

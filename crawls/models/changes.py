"""Change alerts: one check per completed crawl of a watched schedule (crawls/alerts.py)."""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import F
from django.utils import timezone

from crawls.lease import Leased, LeaseQuerySet, due_index
from crawls.models.crawl import Crawl


class ChangeCheckStatus(models.TextChoices):
    PENDING = "pending"  # to compare with the previous crawl (due at retry_at)
    DONE = "done"  # compared; `changed` says whether crawl.changed was recorded
    FAILED = "failed"  # could not be compared after every attempt; `error` says why


class ChangeCheck(Leased):
    """Whether a watched schedule's crawl changed since its previous complete crawl. One row
    per crawl (unique), claimed through the lease like crawls, so one runner compares it."""

    crawl = models.OneToOneField(Crawl, on_delete=models.CASCADE, related_name="change_check")
    previous = models.ForeignKey(Crawl, null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    status = models.CharField(max_length=16, choices=ChangeCheckStatus.choices,
                              default=ChangeCheckStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    changed = models.BooleanField(default=False)
    counts = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        indexes = [due_index("changecheck")]

    def __str__(self) -> str:
        return f"change check {self.crawl_id[:8]} ({self.status})"

    def _update(self, token: int, **fields) -> bool:
        rows = ChangeCheck.objects.filter(pk=self.pk, lease_token=token,
                                          status=ChangeCheckStatus.PENDING)
        return bool(rows.update(**fields))

    def finish(self, token: int, *, changed: bool, counts: dict, previous=None) -> bool:
        """Compared; False if our lease was taken over (then the caller rolls back)."""
        return self._update(token, status=ChangeCheckStatus.DONE, changed=changed, counts=counts,
                            previous=previous, retry_at=None, lease_owner="", error="",
                            attempts=F("attempts") + 1)

    def retry_later(self, token: int, retry_at: dt.datetime, error: str) -> bool:
        return self._update(token, retry_at=retry_at, lease_owner="", error=error,
                            attempts=F("attempts") + 1)

    def give_up(self, token: int, error: str) -> bool:
        return self._update(token, status=ChangeCheckStatus.FAILED, retry_at=None, lease_owner="",
                            error=error, attempts=F("attempts") + 1)

"""Where crawl events go: webhooks and their deliveries (the outbox)."""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from archiver.errors import NotAllowed
from crawls.lease import Leased, LeaseQuerySet, due_index
from crawls.models.org import Org


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
    event = models.ForeignKey("CrawlEvent", on_delete=models.CASCADE, related_name="deliveries")
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

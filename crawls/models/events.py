"""What a crawl says and is told: its events (and their webhook deliveries), and the live
control messages for its running instances."""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from archiver import conf
from crawls.models.webhooks import Webhook, WebhookDelivery


def iso(value: dt.datetime | None) -> str | None:
    """A time as the payloads show it (UTC, with a Z)."""
    return value.isoformat().replace("+00:00", "Z") if value else None


class CrawlMessage(models.Model):
    """A live control message for a crawl's running instances, until the runner sends it."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="messages")
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
        "crawl.changed",
    )
    ONCE_PER_CRAWL = ("crawl.changed",)  # not a transition: a unique key keeps it to one

    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="events")
    name = models.CharField(max_length=40, choices=[(n, n) for n in NAMES])
    created_at = models.DateTimeField(default=timezone.now)
    payload = models.JSONField()

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(
            fields=["crawl", "name"], name="crawlevent_once_per_crawl",
            condition=Q(name__in=("crawl.changed",)))]

    def __str__(self) -> str:
        return f"{self.name} {self.crawl_id[:8]}"

    @classmethod
    def record(cls, crawl, name: str, now: dt.datetime, extra: dict | None = None) -> CrawlEvent:
        """`crawl` is a Crawl (unannotated: this module sits below crawl.py, which emits)."""
        event = cls(crawl=crawl, name=name, created_at=now)
        event.payload = {
            "event": name,
            "event_id": str(event.event_id),
            "timestamp": iso(now),
            "instance": conf.get().instance_id,
            "crawl": crawl.summary(),
            **(extra or {}),
        }
        event.save()
        deliveries = [
            WebhookDelivery(webhook=hook, event=event, retry_at=now, created_at=now)
            for hook in Webhook.objects.listening(name, crawl.org_id)
        ]
        WebhookDelivery.objects.bulk_create(deliveries)
        return event

"""Schedules: cron entries that queue crawls."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from crawls.fields import validate_tags
from crawls.lease import Leased, LeaseQuerySet, due_index
from crawls.models.crawl import Crawl, first_text
from crawls.models.org import Org


class Schedule(Leased):
    """A cron entry that creates a crawl from a stored configuration when due."""

    org = models.ForeignKey(Org, on_delete=models.CASCADE, related_name="schedules")
    cron = models.CharField(max_length=100)
    config = models.JSONField()
    tags = models.JSONField(default=list, blank=True, validators=[validate_tags])
    enabled = models.BooleanField(default=True)
    last_crawl = models.ForeignKey(Crawl, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    watch = models.JSONField(
        null=True, blank=True,
        help_text='What a change alert watches: null = no alerts, {"pages": true}, '
                  '{"urls": [...]} or {"selector": "..."} (crawls/alerts.py).')
    watch_since = models.DateTimeField(
        null=True, blank=True, help_text="Crawls that end from then on are compared (not older ones).")

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

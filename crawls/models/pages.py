"""The pages of a crawl: one Snapshot per URL the crawler reported."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from crawls.lease import Leased, LeaseQuerySet, due_index


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

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="snapshots")
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
        verbose_name = "archived page"  # the word the admin shows (issue 26)
        indexes = [due_index("snapshot")]
        constraints = [models.UniqueConstraint(fields=["crawl", "url"], name="snapshot_url_once")]

    def __str__(self) -> str:
        return self.url

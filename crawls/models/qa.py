"""Quality review (issue 25): each page of a kept crawl replayed from its archives in
Chromium and compared with its capture (runner/qa.py). One PageReview per page and review;
a review again replaces the crawl's rows."""

from __future__ import annotations

from django.db import models
from django.db.models import Avg, Count, Max, Min, Q


class PageReview(models.Model):
    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="page_reviews")
    url = models.TextField()
    score = models.FloatField(null=True, help_text="The mean of the scores below that could be taken; 0 to 1.")
    text_score = models.FloatField(null=True, help_text="Words of the replayed page vs the captured text.")
    resources_score = models.FloatField(null=True, help_text="Requests of the replay the archive answered.")
    screenshot_score = models.FloatField(null=True, help_text="Replay screenshot vs the capture's (urn:view).")
    resources_total = models.PositiveIntegerField(default=0)
    resources_missing = models.JSONField(default=list, blank=True, help_text="URLs the archive did not hold.")
    replay_shot = models.CharField(max_length=300, blank=True, default="",
                                   help_text="The replay's screenshot, under the data dir.")
    has_capture_shot = models.BooleanField(default=False)
    error = models.TextField(blank=True, default="")
    reviewed_at = models.DateTimeField()

    class Meta:
        ordering = ["score", "id"]
        constraints = [models.UniqueConstraint(fields=["crawl", "url"], name="page_review_once")]

    def __str__(self) -> str:
        return self.url


def review_summary(crawl) -> dict:
    """The crawl's review in numbers: pages, mean and worst score, pages below 0.8."""
    return PageReview.objects.filter(crawl=crawl).aggregate(
        pages=Count("id"), mean=Avg("score"), worst=Min("score"),
        below=Count("id", filter=Q(score__lt=0.8)), failed=Count("id", filter=~Q(error="")),
        reviewed_at=Max("reviewed_at"))

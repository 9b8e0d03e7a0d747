"""Quality review (issue 25): each page of a kept crawl replayed from its archives in
Chromium and compared with its capture (runner/qa.py). One PageReview per page and review;
a review again replaces the crawl's rows."""

from __future__ import annotations

from django.db import models
from django.db.models import Avg, Count, Max, Min, Q

from crawls.lease import Leased, LeaseQuerySet, due_index


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


def _summary_columns() -> dict:
    return {"pages": Count("id"), "mean": Avg("score"), "worst": Min("score"),
            "below": Count("id", filter=Q(score__lt=0.8)), "failed": Count("id", filter=~Q(error="")),
            "reviewed_at": Max("reviewed_at")}


def review_summary(crawl) -> dict:
    """The crawl's review in numbers: pages, mean and worst score, pages below 0.8."""
    return PageReview.objects.filter(crawl=crawl).aggregate(**_summary_columns())


class ReviewStatus(models.TextChoices):
    QUEUED = "queued"  # waits for the crawl's files to be kept, then for a runner
    RUNNING = "running"  # a runner (or `archiver qa`) holds its lease and replays
    DONE = "done"
    FAILED = "failed"  # `error` says why; `archiver qa ID` tries again
    SKIPPED = "skipped"  # no Chromium, or nothing kept to replay: `error` says which


class QualityReview(Leased):
    """The automatic review of a crawl added with --qa: one row per crawl, queued in the
    transaction that ends the crawl, claimed off the runner's tick (runner/qa_queue.py)."""

    crawl = models.OneToOneField("Crawl", on_delete=models.CASCADE, related_name="quality_review")
    status = models.CharField(max_length=16, choices=ReviewStatus.choices, default=ReviewStatus.QUEUED)
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    pages = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        indexes = [due_index("quality_review")]

    def __str__(self) -> str:
        return f"review of {self.crawl_id}: {self.status}"


def review_state(crawl) -> dict | None:
    """The crawl's review for the admin and the API: its automatic review's status (--qa)
    and the summary of its stored scores; None if it was never reviewed nor asked to be."""
    return review_states([crawl.pk]).get(crawl.pk)


def review_states(crawl_ids) -> dict[str, dict]:
    """review_state of many crawls in two queries, whatever their number: the API's list
    shows one per crawl and must not query twice per row (its p99, issue 27)."""
    ids = list(crawl_ids)
    rows = {row.crawl_id: row for row in QualityReview.objects.filter(crawl_id__in=ids)}
    per_crawl = PageReview.objects.filter(crawl_id__in=ids).values("crawl").annotate(**_summary_columns())
    summaries = {s.pop("crawl"): s for s in per_crawl.order_by()}
    return {crawl_id: _state(rows.get(crawl_id), summaries.get(crawl_id))
            for crawl_id in ids if crawl_id in rows or crawl_id in summaries}


def _state(row: QualityReview | None, summary: dict | None) -> dict:
    summary = summary or dict.fromkeys(_summary_columns(), None) | {"pages": 0, "below": 0, "failed": 0}
    return {
        "status": row.status if row else ReviewStatus.DONE,
        "error": (row.error or None) if row else None,
        "attempts": row.attempts if row else 0,
        "started_at": row.started_at if row else None,
        "finished_at": row.finished_at if row else summary["reviewed_at"],
        "pages": summary["pages"],
        "mean": None if summary["mean"] is None else round(summary["mean"], 3),
        "worst": summary["worst"],
        "below_0_80": summary["below"],
        "failed_pages": summary["failed"],
    }

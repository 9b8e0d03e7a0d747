"""What a crawl keeps: its archive files (CrawlFile) and its log lines (CrawlLog)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from crawls.models.search import IndexQuerySet


class CrawlFile(models.Model):
    """An archive file a crawl produced, kept under a data dir or in a bucket (docs/storage.md)."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=500, unique=True,
                            help_text="Relative to the data dir, or the object's key in the bucket.")
    root = models.CharField(
        max_length=500, blank=True, default="",
        help_text="The data dir holding it ('' = any runner's own), or s3://<bucket>.",
    )
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    crc32 = models.PositiveBigIntegerField(
        null=True, blank=True, editable=False,
        help_text="CRC-32 of its bytes, computed once for the collection download's zip layout.")
    created_at = models.DateTimeField(default=timezone.now)
    # Search (crawls/models/search.py): when its page text was indexed; the indexer's lease.
    indexed_at = models.DateTimeField(null=True, blank=True)
    index_retry_at = models.DateTimeField(null=True, blank=True)
    index_error = models.TextField(blank=True, default="")

    payloads_indexed = models.BooleanField(
        default=False, help_text="Its payload digests and dependencies are recorded (dedup).")
    payloads_retry_at = models.DateTimeField(
        null=True, blank=True, help_text="It could not be read for dedup: tried again from then.")

    # Its signature and hashes (crawls/wacz_auth.py), checked when it was kept.
    signer = models.CharField(max_length=200, blank=True, default="",
                              help_text="Who signed it: 'this archiver (key …)', a domain, or 'not signed'.")
    verified_at = models.DateTimeField(null=True, blank=True)
    verify_ok = models.BooleanField(null=True, blank=True, help_text="Every check held (None: not verified).")
    verify_result = models.CharField(max_length=1000, blank=True, default="",
                                     help_text="What held, or each thing that did not.")

    objects = IndexQuerySet.as_manager()

    class Meta:
        ordering = ["crawl", "created_at"]

    def __str__(self) -> str:
        return self.path

    def mark_payloads_indexed(self) -> None:
        """Its payload digests and dependencies are recorded (crawls/dedup.py)."""
        CrawlFile.objects.filter(pk=self.pk).update(payloads_indexed=True)
        self.payloads_indexed = True

    def payloads_failed(self, retry_at) -> None:
        """It could not be read for dedup: the next files go first, it again from `retry_at`."""
        CrawlFile.objects.filter(pk=self.pk).update(payloads_retry_at=retry_at)
        self.payloads_retry_at = retry_at

    def summary(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}

    def record_verification(self, signer: str, ok: bool, result: str, now) -> None:
        self.signer, self.verify_ok, self.verify_result, self.verified_at = signer[:200], ok, result[:1000], now
        CrawlFile.objects.filter(pk=self.pk).update(signer=self.signer, verify_ok=ok,
                                                     verify_result=self.verify_result, verified_at=now)

    def remember_crc32(self, value: int) -> None:
        """Keep the CRC-32 read once from the file: the same bytes always have the same one."""
        CrawlFile.objects.filter(pk=self.pk, crc32__isnull=True).update(crc32=value)
        self.crc32 = value

    def mark_indexed(self, now) -> None:
        """Its page text is in the search index."""
        self.indexed_at, self.index_retry_at, self.index_error = now, None, ""
        self.save(update_fields=["indexed_at", "index_retry_at", "index_error"])

    def index_failed(self, error: str, retry_at) -> None:
        """Its page lists could not be read: tried again at `retry_at`, the reason shown."""
        self.index_retry_at, self.index_error = retry_at, error[:500]
        self.save(update_fields=["index_retry_at", "index_error"])


class CrawlLog(models.Model):
    """A log line of a crawl: the crawler's errors from Redis, and the runner's own notes."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="logs")
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


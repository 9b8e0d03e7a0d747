"""The searchable text of archived pages (issue 24): one PageText per page entry of a kept
WACZ's page lists, and the index state of each kept file.

The full-text index itself is the database's: an FTS5 table beside crawls_pagetext on SQLite,
a generated tsvector column with a GIN index on PostgreSQL (migration 0017_search); the one
search function over both is crawls/search.py.
"""

from __future__ import annotations

import datetime as dt

from django.db import models
from django.db.models import Q

INDEX_LEASE = dt.timedelta(minutes=10)  # an indexing pass interrupted is taken again after this
INDEX_RETRY = dt.timedelta(minutes=30)  # a file that could not be read is tried again after this
TEXT_INDEXED = 256 << 10  # characters of a page's text indexed (tsvector caps at 1 MB)


class PageText(models.Model):
    """A page's title and text, as a kept archive's pages.jsonl lists them."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="page_texts")
    file = models.ForeignKey("CrawlFile", on_delete=models.CASCADE, related_name="page_texts")
    url = models.TextField()
    title = models.TextField(blank=True, default="")
    text = models.TextField(blank=True, default="")
    captured_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["crawl", "captured_at"], name="pagetext_crawl_time")]

    def __str__(self) -> str:
        return self.url


class IndexQuerySet(models.QuerySet):
    """The kept files as the indexer's queue (CrawlFile.objects)."""

    def to_index(self, now: dt.datetime):
        return self.filter(indexed_at__isnull=True).filter(
            Q(index_retry_at__isnull=True) | Q(index_retry_at__lte=now))

    def claim_index(self, file_id: int, seen_retry_at, now: dt.datetime) -> bool:
        """Win one file for an indexing pass (compare-and-set on index_retry_at): another
        runner's pass, or this one's after a crash, takes it again once the lease ran out."""
        return bool(self.filter(pk=file_id, indexed_at__isnull=True, index_retry_at=seen_retry_at)
                    .update(index_retry_at=now + INDEX_LEASE))

    def reindex(self) -> int:
        """Every file of these indexed again, at once."""
        return self.update(indexed_at=None, index_retry_at=None, index_error="")

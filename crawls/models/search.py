"""The searchable text of archived pages (issue 24): one PageText per page entry of a kept
WACZ's page lists, and the index state of each kept file.

The full-text index itself is the database's: an FTS5 table beside crawls_pagetext on SQLite,
a generated tsvector column with a GIN index on PostgreSQL (migration 0017_search); the one
search function over both is crawls/search.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator

from django.db import connection, models
from django.db.models import Q

INDEX_LEASE = dt.timedelta(minutes=10)  # an indexing pass interrupted is taken again after this
INDEX_RETRY = dt.timedelta(minutes=30)  # a file that could not be read is tried again after this
TEXT_INDEXED = 256 << 10  # characters of a page's text indexed (tsvector caps at 1 MB)


BATCH = 500  # rows of one INSERT on SQLite

# A page's (url, title, text, captured_at), as the indexer reads it from a page list.
PageRow = tuple[str, str, str, dt.datetime | None]


class PageTextQuerySet(models.QuerySet):
    def add(self, crawl_id: str, file_id: int, rows: Iterable[PageRow]) -> int:
        """Store the rows as PageTexts of that crawl's file: how many."""
        if connection.vendor == "postgresql":
            return self._copy(crawl_id, file_id, rows)
        count = 0
        for batch in _batches(rows):
            self.bulk_create(PageText(crawl_id=crawl_id, file_id=file_id, url=url, title=title,
                                      text=text, captured_at=at)
                             for url, title, text, at in batch)
            count += len(batch)
        return count

    def _copy(self, crawl_id: str, file_id: int, rows: Iterable[PageRow]) -> int:
        # COPY rather than INSERTs of 500 rows (issue 24: indexing >= 2,000 pages/s at
        # 100,000 pages; the INSERTs reached 1,540 on a quiet machine): the server parses no
        # statement of 3,000 parameters, builds no model objects, and computes each row's
        # tsvector and GIN entries while this process still reads and sends the next rows.
        count = 0
        with connection.cursor() as cursor, cursor.copy(
                "COPY crawls_pagetext (crawl_id, file_id, url, title, text, captured_at) "
                "FROM STDIN") as copy:
            for url, title, text, at in rows:
                copy.write_row((crawl_id, file_id, url, title, text, at))
                count += 1
        return count


def _batches(rows: Iterable[PageRow]) -> Iterator[list[PageRow]]:
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


class PageText(models.Model):
    """A page's title and text, as a kept archive's pages.jsonl lists them."""

    crawl = models.ForeignKey("Crawl", on_delete=models.CASCADE, related_name="page_texts")
    file = models.ForeignKey("CrawlFile", on_delete=models.CASCADE, related_name="page_texts")
    url = models.TextField()
    title = models.TextField(blank=True, default="")
    text = models.TextField(blank=True, default="")
    captured_at = models.DateTimeField(null=True, blank=True)

    objects = PageTextQuerySet.as_manager()

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

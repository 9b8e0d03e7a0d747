"""Deduplication across an org's crawls (docs/storage.md, "Deduplication"): the payload
digests of every kept response, and which kept archive needs which (revisit records)."""

from __future__ import annotations

from django.db import models

from archiver.errors import ArchiverError


class Required(ArchiverError):
    """An archive other kept archives depend on (their revisit records point into it)."""


class PayloadDigest(models.Model):
    """The first kept record of a payload in an org: what a revisit record refers to."""

    org = models.ForeignKey("Org", on_delete=models.CASCADE, related_name="payload_digests")
    digest = models.CharField(max_length=80, help_text="WARC-Payload-Digest, e.g. sha1:<base32>.")
    url = models.TextField()
    date = models.CharField(max_length=32, help_text="WARC-Date of the record holding it.")
    crawl_file = models.ForeignKey("CrawlFile", on_delete=models.CASCADE, related_name="payloads")
    # The record's validators, when its index line gave them (archiver's crawler writes
    # them): a recrawl's GET of `url` is then conditional (docs/storage.md).
    mime = models.CharField(max_length=100, blank=True, default="")
    etag = models.CharField(max_length=200, blank=True, default="")
    last_modified = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["org", "digest"], name="payload_org_digest")]

    def __str__(self) -> str:
        return self.digest

    @classmethod
    def add_batch(cls, crawl_file, rows: list[tuple[str, ...]]) -> None:
        """(digest, url, date[, mime, etag, last modified]) rows of one kept file; a digest
        the org has already stays with its first holder."""
        cls.objects.bulk_create(
            [cls(org_id=crawl_file.crawl.org_id, digest=d, url=u, date=t, crawl_file=crawl_file,
                 **dict(zip(("mime", "etag", "last_modified"), rest, strict=False)))
             for d, u, t, *rest in rows], ignore_conflicts=True)


class FileDependency(models.Model):
    """A kept archive (`file`) whose revisit records point into another one (`required`)."""

    file = models.ForeignKey("CrawlFile", on_delete=models.CASCADE, related_name="requires_links")
    # PROTECT: a last guard; actions and retention refuse first, naming the dependents.
    required = models.ForeignKey("CrawlFile", on_delete=models.PROTECT,
                                 related_name="required_by_links")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["file", "required"], name="dependency_once")]

    @classmethod
    def record(cls, crawl_file, required: list) -> None:
        cls.objects.bulk_create([cls(file=crawl_file, required=r) for r in required
                                 if r.pk != crawl_file.pk], ignore_conflicts=True)


def dependent_crawls(crawl) -> list:
    """Other crawls whose kept files require one of `crawl`'s (their short ids, sorted)."""
    from crawls.models.crawl import Crawl

    found = (Crawl.objects.filter(files__requires_links__required__crawl=crawl)
             .exclude(pk=crawl.pk).distinct())
    return sorted(c.short_id for c in found)


def check_deletable(crawl) -> None:
    """Raise Required, naming the dependents, if other crawls need `crawl`'s archives."""
    names = dependent_crawls(crawl)
    if names:
        raise Required(f"crawl {crawl.short_id} is needed by crawl(s) {', '.join(names)}: "
                       "they were deduplicated against its archives (their revisit records "
                       "point into them)")

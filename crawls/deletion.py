"""Delete one finished crawl with its files, on request (`archiver delete ID`, the admin).

Active crawls are refused: a crawler may still write to their folder. Files go first:
objects from their bucket, files on disk through retention's guards (inside the data dir,
never through a symbolic link); the rows go only if the crawl is still final, and its archive bytes leave its org's `bytes_stored`.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Sum

from archiver import conf
from archiver.errors import NotAllowed
from crawls.models import Crawl, CrawlStatus, Org
from crawls.retention import delete_all_files
from crawls.storage import StorageError

log = logging.getLogger(__name__)


def delete_crawl(crawl: Crawl, settings: conf.Settings | None = None) -> list[str]:
    """Delete a final crawl, its files and its rows; returns the deleted files' paths."""
    settings = settings or conf.get()
    if crawl.status not in CrawlStatus.FINAL:
        raise NotAllowed(f"cannot delete crawl {crawl.short_id}: it is {crawl.status} "
                         f"(stop or cancel it first)")
    try:
        paths = delete_all_files(crawl, settings)
    except (OSError, StorageError) as exc:
        raise NotAllowed(f"could not delete the files of crawl {crawl.short_id}: {exc}") from None
    with transaction.atomic():
        size = crawl.files.aggregate(n=Sum("size"))["n"] or 0
        deleted, _ = Crawl.objects.filter(pk=crawl.pk, status__in=CrawlStatus.FINAL).delete()
        if not deleted:
            raise NotAllowed(f"crawl {crawl.short_id} changed while its files were deleted")
        Org(pk=crawl.org_id).add_bytes(-size)
    log.info("deleted crawl %s (%s) and %d file(s)", crawl.short_id, crawl.status, len(paths))
    return paths

"""Deleting a finished crawl on request: its files, then its rows, as retention does.

The files go through retention's own guards (inside the data dir, never a symbolic link),
and the crawl's rows are deleted only if it is still final, so a crawl retried meanwhile is
kept (its files may be gone then, as with retention; the runner writes new ones).
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Sum

from archiver import conf
from crawls import retention, storage
from crawls.api.errors import ApiError
from crawls.models import Crawl, CrawlStatus, Org

log = logging.getLogger(__name__)


def delete_crawl(crawl: Crawl, settings: conf.Settings) -> bool:
    """Delete a final crawl's files and rows; False if it stopped being final meanwhile."""
    try:
        retention.delete_all_files(crawl, settings)
    except storage.StorageError as exc:
        raise ApiError(503, f"could not delete the files of crawl {crawl.short_id}: {exc}") from None
    with transaction.atomic():
        size = crawl.files.aggregate(n=Sum("size"))["n"] or 0
        deleted, _ = Crawl.objects.filter(pk=crawl.pk, status__in=CrawlStatus.FINAL).delete()
        if not deleted:
            log.warning("api: crawl %s changed while its files were deleted; kept", crawl.short_id)
            return False
        Org(pk=crawl.org_id).add_bytes(-size)
    log.info("api: deleted crawl %s (%s)", crawl.short_id, crawl.status)
    return True

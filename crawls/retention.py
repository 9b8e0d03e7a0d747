"""Retention: delete finished crawls older than ARCHIVER_RETENTION_DAYS, files first.

Only finished crawls are ever deleted (never a queued, running, waiting or paused one).
A file is deleted only if its path resolves inside the data dir (for kept archives: inside
where the data dir's archives/ leads, which may be another disk) and is not itself a
symbolic link; anything else is logged and left alone. Archives kept in object storage
(docs/storage.md) are deleted from their bucket first; a store that refuses keeps the
crawl. The crawl's rows go after its files, and the bytes of its archive files leave its
org's `bytes_stored`.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

from django.db import transaction
from django.db.models import Sum

from archiver import conf
from archiver.errors import ArchiverError
from crawls import storage
from crawls.models import Crawl, CrawlStatus, Org

log = logging.getLogger(__name__)
S = CrawlStatus


class UnsafePath(ArchiverError):
    """A path retention will not touch: outside the data dir, or a symbolic link."""


def expired(now: dt.datetime, retention_days: float):
    """Finished crawls whose end is more than `retention_days` before `now`, oldest first."""
    cutoff = now - dt.timedelta(days=retention_days)
    # An archive others were deduplicated against stays until they are gone (docs/lifecycle.md).
    return (Crawl.objects.filter(status__in=S.FINAL, finished_at__lt=cutoff)
            .exclude(files__required_by_links__isnull=False).distinct().order_by("finished_at"))


def purge_expired(now: dt.datetime, batch: int = 100, settings: conf.Settings | None = None) -> bool:
    """Delete up to `batch` expired crawls; True if any was due (call again soon)."""
    settings = settings or conf.get()
    if settings.retention_days is None:
        return False
    crawls = list(expired(now, settings.retention_days).select_related("org")[:batch])
    for crawl in crawls:
        purge(crawl, now, settings)
    return bool(crawls)


def purge(crawl: Crawl, now: dt.datetime, settings: conf.Settings) -> bool:
    """One crawl: its files, its working folder, then its rows; False if it was kept."""
    try:
        delete_all_files(crawl, settings)
    except (OSError, storage.StorageError) as exc:
        log.error("retention: could not delete the files of crawl %s, keeping it: %s", crawl.short_id, exc)
        return False
    with transaction.atomic():
        size = crawl.files.aggregate(n=Sum("size"))["n"] or 0
        cutoff = now - dt.timedelta(days=settings.retention_days)
        deleted, _ = Crawl.objects.filter(pk=crawl.pk, status__in=S.FINAL, finished_at__lt=cutoff).delete()
        if not deleted:
            log.warning("retention: crawl %s changed while its files were deleted", crawl.short_id)
            return False
        Org(pk=crawl.org_id).add_bytes(-size)
    log.info("retention: deleted crawl %s (%s, finished %s)", crawl.short_id, crawl.status,
             crawl.finished_at.isoformat())
    return True


def delete_all_files(crawl: Crawl, settings: conf.Settings) -> list[str]:
    """A final crawl's archives (objects in the bucket first, then files under the data dir)
    and its working folder; the paths and keys deleted. OSError or StorageError when one
    could not be deleted: the caller keeps the crawl's rows, so a later pass tries again."""
    root = settings.data_dir.resolve()
    archives = (root / "archives").resolve()
    files = list(crawl.files.all())
    storage.delete_objects(files, settings)
    for crawl_file in files:
        if storage.is_object(crawl_file):
            continue
        try:
            kept_path(root, crawl_file.path).unlink(missing_ok=True)
        except UnsafePath as exc:
            log.warning("retention: leaving %s alone: %s", crawl_file.path, exc)
    for crawl_file in files:  # the excerpts collections cut from it hold copies of its records
        for excerpt in (root / "excerpts").glob(f"{crawl_file.pk}-*"):  # crawls/excerpts.py
            excerpt.unlink(missing_ok=True)
    delete_empty_folder(archives, archives / crawl.id)
    delete_tree(root, settings.crawls_dir / crawl.id)
    delete_tree(root, root / "qa" / crawl.id)  # its quality review's screenshots
    return [f.path for f in files]


def kept_path(data_dir: Path, relative: str) -> Path:
    """Where a file recorded under the data dir is, checked; UnsafePath otherwise. archives/
    itself may be a link or a mount the operator placed (ARCHIVER_STORAGE_URL as a local
    folder makes it a link): a file under it is checked to stay inside where it leads."""
    root = data_dir.resolve()
    if relative.startswith("archives/"):
        return inside((root / "archives").resolve(), relative.removeprefix("archives/"))
    return inside(root, relative)


def inside(root: Path, relative: str | Path) -> Path:
    """`root / relative` if it is inside `root` and not a symbolic link; else UnsafePath."""
    path = root / relative
    if path.is_symlink():
        raise UnsafePath(f"{path} is a symbolic link")
    if not path.resolve().is_relative_to(root):
        raise UnsafePath(f"{path} is outside the data dir {root}")
    return path


def checked(root: Path, target) -> Path | None:
    """`target` if it is safely inside the data dir; otherwise None, with a warning."""
    try:
        return inside(root, target)
    except UnsafePath as exc:
        log.warning("retention: leaving %s alone: %s", target, exc)
        return None


def delete_empty_folder(root: Path, folder: Path) -> None:
    """The crawl's folder of archives, once its files are gone (anything else in it stays)."""
    path = checked(root, folder)
    if path and path.is_dir() and not any(path.iterdir()):
        path.rmdir()


def delete_tree(root: Path, folder: Path) -> None:
    """Delete a folder inside the data dir; links inside it are removed, never followed."""
    path = checked(root, folder)
    if path and path.is_dir():
        shutil.rmtree(path)

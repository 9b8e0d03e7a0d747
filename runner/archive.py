"""The runner's file operations on what crawlers leave: keep session WACZ files, forget
what they hold, delete a canceled crawl's files.

Only `delete_files` deletes kept files, and only for cancel, delete and retention.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from crawls.models import Crawl, CrawlFile, Process

log = logging.getLogger(__name__)


@dataclass
class Kept:
    path: Path
    size: int = 0
    new: bool = False  # recorded by this call (not by an earlier look)
    warnings: list[str] = field(default_factory=list)


def collection_dir(data_dir: Path, crawl: Crawl, instance: int) -> Path:
    """Where instance `instance` of `crawl` writes its collection (mounted on /crawls)."""
    return data_dir / "crawls" / crawl.pk / str(instance) / "collections" / crawl.pk


def collect_wacz(data_dir: Path, crawl: Crawl, process: Process, now: dt.datetime) -> Kept | None:
    """Move an instance's session WACZ into the archive (before any relaunch overwrites it).

    Returns the kept file once it is recorded (now or by an earlier look), else None.
    """
    source = collection_dir(data_dir, crawl, process.instance) / f"{crawl.pk}.wacz"
    folder = data_dir / "archives" / crawl.pk
    target = folder / f"{crawl.pk}-{process.instance}-{process.pk}.wacz"
    if source.exists():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.move(source, target)
    if not target.exists():
        return None
    path = str(target.relative_to(data_dir))
    if CrawlFile.objects.filter(path=path).exists():
        return Kept(target)
    size, digest = target.stat().st_size, sha256_of(target)
    with transaction.atomic():
        CrawlFile.objects.create(crawl=crawl, path=path, size=size, sha256=digest, created_at=now,
                                 root=str(data_dir))
        crawl.org.add_bytes(size)
    return Kept(target, size, new=True)


def forget_archived(data_dir: Path, crawl: Crawl, process: Process, wacz: Path) -> int | None:
    """Delete from the instance's folder what a kept WACZ holds; returns the bytes left in
    its archive/ (None when the WACZ cannot be read and nothing was deleted).

    Every session's WACZ packs every WARC in archive/ (and the page lists and logs), so
    without this the next session's WACZ would repeat this one. A file is deleted only if
    the WACZ holds it whole (same size); the per-WARC index files go with their WARC.
    """
    collection = collection_dir(data_dir, crawl, process.instance)
    try:
        with zipfile.ZipFile(wacz) as archive:
            members = {info.filename: info.file_size for info in archive.infolist()}
    except (zipfile.BadZipFile, OSError) as exc:
        log.warning("crawl %s: cannot read %s (%s); leaving the instance's files", crawl.short_id,
                    wacz.name, exc)
        return None
    for name, size in members.items():
        folder, _, base = name.partition("/")
        if folder not in ("archive", "pages", "logs") or not base or Path(base).name != base \
                or base in (".", ".."):
            continue
        path = collection / folder / base
        with contextlib.suppress(FileNotFoundError):
            if not path.is_file() or path.is_symlink() or path.stat().st_size != size:
                continue
            path.unlink()
            if folder == "archive":
                (collection / "warc-cdx" / f"{base}.cdx").unlink(missing_ok=True)
                (collection / "warc-cdxj" / f"{base}.cdxj").unlink(missing_ok=True)
    return sum(path.stat().st_size for path in (collection / "archive").glob("*.warc*")
               if path.is_file() and not path.is_symlink())


def keep_leftovers(data_dir: Path, crawl: Crawl, now: dt.datetime) -> list[str]:
    """What a crawl's crawlers wrote but no kept WACZ holds (one died while packaging, or was
    removed before it could) is moved into the archive and recorded, never deleted: a
    session WACZ nobody collected, and WARCs left in archive/. Returns warnings to log."""
    warnings: list[str] = []
    root = data_dir / "crawls" / crawl.pk
    if not root.is_dir() or root.is_symlink():
        return warnings
    for instance_dir in sorted(root.iterdir()):
        collection = instance_dir / "collections" / crawl.pk
        if not instance_dir.name.isdigit() or instance_dir.is_symlink() or not collection.is_dir():
            continue
        left = [collection / f"{crawl.pk}.wacz", *sorted((collection / "archive").glob("*.warc*"))]
        for path in left:
            if path.is_symlink() or not path.is_file() or path.stat().st_size == 0:
                continue
            name = f"{crawl.pk}-{instance_dir.name}-left-{path.name}"
            kept = keep_file(data_dir, crawl, path, name, now)
            warnings.append(f"kept {path.name} that no session archive held, as {kept.name}")
    return warnings


def keep_file(data_dir: Path, crawl: Crawl, source: Path, name: str, now: dt.datetime) -> Path:
    """Move `source` into archives/<crawl>/`name` and record it once."""
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    shutil.move(source, target)
    path = str(target.relative_to(data_dir))
    if not CrawlFile.objects.filter(path=path).exists():
        size = target.stat().st_size
        with transaction.atomic():
            CrawlFile.objects.create(crawl=crawl, path=path, size=size, sha256=sha256_of(target),
                                     created_at=now, root=str(data_dir))
            crawl.org.add_bytes(size)
    return target


def delete_files(data_dir: Path, crawl: Crawl) -> None:
    """A canceled crawl keeps nothing: its files leave the disk and the org's bytes."""
    for record in crawl.files.all():
        if record.root and record.root != str(data_dir):
            continue  # held by another runner's data dir: that runner deletes it
        (data_dir / record.path).unlink(missing_ok=True)
        with transaction.atomic():
            if CrawlFile.objects.filter(pk=record.pk).delete()[0]:
                crawl.org.add_bytes(-record.size)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()

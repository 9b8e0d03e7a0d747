"""`archiver import FILE...`: archives made elsewhere become an item of the org.

    imported = import_archives(settings, org, [path, ...], now)   # or ImportRefused

An import is a Crawl of origin "import" (complete, never launched) with one CrawlFile per
WACZ kept in archives/<crawl>/, and a Snapshot per page, so everything that works on a
crawl's archives works on it unchanged: its pages listed, its text indexed for search and
its payloads put in the dedup index (the periodic steps take every new CrawlFile), replay,
collections, `archiver diff`, retention and deletion.

- A WACZ (any producer) is checked (runner/intake_wacz.py) and kept as it is; its pages are
  those of its page lists.
- A multi-WACZ (Browsertrix's collection download) is unpacked into its WACZs, each checked.
- A WARC or WARC.gz (any producer) is rewritten one gzip member per record
  (runner/intake_warc.py), its pages found in its records (HTML 200 responses), and packaged
  into a WACZ by the crawler's own packaging (archiver_crawler.wacz.build_wacz: the index, the
  page list with the pages' text, datapackage.json).

Every file is hostile input. All the work is done in data_dir/imports/<crawl>/ first; only
when every file passed are the rows written and the files moved into archives/<crawl>/, in
one transaction. Any refusal or failure leaves no row and no file (the staging folder is
removed whatever happens), and says which file and why.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from django.db import transaction

from archiver.conf import Settings
from archiver.errors import ArchiverError
from crawls import provenance, wacz_auth
from crawls.config import CrawlConfig, human_size
from crawls.models import Crawl, CrawlFile, CrawlOrigin, CrawlStatus, Org
from crawls.models.crawl import new_id
from runner import archive, file_guard, intake_wacz, intake_warc
from runner.ingest import snapshot_from, upsert

log = logging.getLogger(__name__)

IMPORTS = "imports"  # data_dir/imports/<crawl>/: an import's work, removed when it ends
ABANDONED = dt.timedelta(days=1)
KINDS = {b"PK\x03\x04": "wacz", b"\x1f\x8b": "warc.gz", b"WARC/": "warc"}


class ImportRefused(ArchiverError):
    """An archive that is not imported (hostile, damaged, over the org's quota); nothing was
    kept. The message names the file and says why."""


@dataclass
class Staged:
    """One WACZ ready in the staging folder."""

    name: str  # its name in archives/<crawl>/
    source: str  # the file it came from, as given
    pages: list[dict]
    signed: bool = False
    first_url: str = ""  # of its first record, when it lists no page
    size: int = 0
    sha256: str = ""


@dataclass
class Imported:
    crawl: Crawl
    files: list[CrawlFile] = field(default_factory=list)
    pages: int = 0
    signed: list[str] = field(default_factory=list)  # names of the kept WACZs that are signed


def kind_of(head: bytes) -> str | None:
    return next((kind for magic, kind in KINDS.items() if head.startswith(magic)), None)


def import_archives(settings: Settings, org: Org, paths: list[Path], now: dt.datetime,
                    stop: threading.Event | None = None) -> Imported:
    """Take in the archives at `paths` as one new item of `org`: all of them, or none."""
    if not paths:
        raise ImportRefused("no file to import")
    limits = archive.Limits.of(settings, stop)
    sizes = [measure(path, limits) for path in paths]
    check_quota(org, sum(sizes))
    crawl_id = new_id()
    staging = settings.data_dir / IMPORTS / crawl_id
    staging.mkdir(mode=0o700, parents=True)
    forget_abandoned(staging.parent, now)
    try:
        staged: list[Staged] = []
        for n, path in enumerate(paths, 1):
            try:
                staged += stage(settings, path, staging, f"{crawl_id}-import-{n}", limits)
            except (archive.Refused, OSError) as exc:
                raise ImportRefused(f"{path}: {exc}") from None
        check_quota(org, sum(item.size for item in staged))
        return commit(settings, org, crawl_id, staging, staged, now)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def forget_abandoned(folder: Path, now: dt.datetime) -> None:
    """What imports killed mid-way (a crash, SIGKILL) left in imports/: anything untouched
    for ABANDONED. An import under way touches its folder far more often than that."""
    for entry in folder.iterdir():
        age = now.timestamp() - entry.lstat().st_mtime
        if age > ABANDONED.total_seconds():
            log.warning("removing %s, left by an import that did not finish", entry)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def measure(path: Path, limits: archive.Limits) -> int:
    """The file's size, or ImportRefused: it must be a regular file under the size cap."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ImportRefused(f"{path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ImportRefused(f"{path}: {file_guard.kind_of(st.st_mode)}, not a regular file")
    if st.st_size > limits.file_bytes:
        raise ImportRefused(f"{path}: {human_size(st.st_size)}, over the "
                            f"{human_size(limits.file_bytes)} an archive may have "
                            "(ARCHIVER_ARCHIVE_MAX_BYTES)")
    return st.st_size


def check_quota(org: Org, size: int) -> None:
    org.refresh_from_db(fields=["bytes_stored"])
    if org.storage_quota_reached(size):
        raise ImportRefused(
            f"org '{org.slug}' storage quota: {human_size(org.bytes_stored)} of "
            f"{human_size(org.storage_quota_bytes)} used, and the import needs {human_size(size)}")


def stage(settings: Settings, path: Path, staging: Path, prefix: str,
          limits: archive.Limits) -> list[Staged]:
    """The WACZs `path` becomes, written and checked in `staging`."""
    with open(path, "rb", buffering=0) as source:  # unbuffered: zip reads move its offset
        st = os.fstat(source.fileno())
        kind = kind_of(source.read(8))
        source.seek(0)
        if kind is None:
            raise archive.Refused("not a WARC, WARC.gz or WACZ (by its first bytes)")
        if kind != "wacz":
            return [stage_warc(settings, source, st.st_size, kind == "warc.gz", staging, prefix,
                               str(path), limits)]
        names = intake_wacz.member_names(source.fileno(), st.st_size, limits)
        if not intake_wacz.is_multi(names):
            source.seek(0)
            with open_new(staging / f"{prefix}.wacz") as copy:
                shutil.copyfileobj(source, copy, archive.CHUNK)
            items = [checked(staging, f"{prefix}.wacz", str(path), limits)]
            return [item if item.pages or item.signed else repackaged(settings, staging, item, limits)
                    for item in items]
        with archive.folder(staging.parent, staging.name) as folder:
            parts = intake_wacz.unpack_multi(source.fileno(), st.st_size, names, folder, prefix,
                                             limits)
    items = [checked(staging, name, f"{path} ({name})", limits) for name in parts]
    return [item if item.pages or item.signed else repackaged(settings, staging, item, limits)
            for item in items]


def open_new(path: Path):
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")


def checked(staging: Path, name: str, source: str, limits: archive.Limits) -> Staged:
    with open(staging / name, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        result = intake_wacz.check_wacz(fh.fileno(), size, limits)
    return measured(staging, Staged(name, source, result.pages, result.signed))


def measured(staging: Path, item: Staged) -> Staged:
    hashed = hashlib.sha256()
    with open(staging / item.name, "rb") as fh:
        while chunk := fh.read(archive.CHUNK):
            hashed.update(chunk)
        item.size, item.sha256 = fh.tell(), hashed.hexdigest()
    return item


def stage_warc(settings: Settings, source, size: int, gzipped: bool, staging: Path,
               prefix: str, given: str, limits: archive.Limits) -> Staged:
    """A WARC rewritten one record a member, its pages found, packaged as <prefix>.wacz."""
    return package(settings, iter([(source, size, gzipped)]), staging, prefix, given, limits)


def package(settings: Settings, warcs: Iterator[tuple[BinaryIO, int, bool]], staging: Path,
            prefix: str, given: str, limits: archive.Limits) -> Staged:
    """WARCs (stream, size, gzipped) rewritten one record a member, their pages found and
    indexed, packaged by the crawler's build_wacz as <prefix>.wacz in `staging`."""
    from archiver_crawler.wacz import build_wacz  # the crawler's packaging, as its crawls get
    from archiver_crawler.warc import sidecar_index_path

    collection = staging / prefix
    (collection / "archive").mkdir(parents=True)
    (collection / "pages").mkdir()
    (collection / "warc-cdxj").mkdir()
    pages: dict[str, dict] = {}
    first_url = ""
    for n, (source, size, gzipped) in enumerate(warcs, 1):
        warc = collection / "archive" / f"{prefix}-{n}.warc.gz"
        with open_new(warc) as out:
            intake_warc.rechunk(source, size, gzipped, out, limits)
        found, index = intake_warc.find_pages(warc, limits)
        for page in found:
            pages.setdefault(page["url"], page)
        first_url = first_url or (json.loads(index[0].split(" ", 2)[2])["url"] if index else "")
        # The index build_wacz takes, as a crawler leaves it beside its WARC.
        sidecar_index_path(warc).write_text("".join(line + "\n" for line in index),
                                            encoding="utf-8")
    listed = list(pages.values())
    (collection / "pages" / "pages.jsonl").write_text(
        "".join(line + "\n" for line in intake_warc.page_lines(listed)), encoding="utf-8")
    built = build_wacz(collection, prefix, listed[0]["url"] if listed else None,
                       sign_env=wacz_auth.crawler_env(settings))
    if built is None:
        raise archive.Refused("no WACZ could be made of it")
    os.replace(built, staging / f"{prefix}.wacz")
    shutil.rmtree(collection)
    return measured(staging, Staged(f"{prefix}.wacz", given, listed, first_url=first_url))


def repackaged(settings: Settings, staging: Path, item: Staged, limits: archive.Limits) -> Staged:
    """An unsigned WACZ that lists no page, packaged again from its WARCs, so that its pages
    are found in its records (HTML 200 responses) with their text for search, as a WARC's
    are. A signed one is kept as it is: its signature matters more."""
    prefix = item.name.removesuffix(".wacz")
    return package(settings, wacz_warcs(staging / item.name), staging, prefix, item.source,
                   limits)


def wacz_warcs(path: Path) -> Iterator[tuple[BinaryIO, int, bool]]:
    """The WARCs of a checked WACZ (its archive/ members), each open while it is taken."""
    try:
        with open(path, "rb") as fh, zipfile.ZipFile(fh) as wacz:
            for info in wacz.infolist():
                if info.filename.startswith("archive/") and not info.is_dir():
                    with wacz.open(info) as stream:
                        yield stream, info.file_size, stream.peek(2)[:2] == b"\x1f\x8b"
    except intake_wacz.ZIP_ERRORS as exc:
        raise archive.Refused(f"not a readable zip ({exc})") from None


def commit(settings: Settings, org: Org, crawl_id: str, staging: Path, staged: list[Staged],
           now: dt.datetime) -> Imported:
    """The rows written and the files moved in, in one transaction; on any failure, the
    moved files are removed again and the rows rolled back."""
    target = settings.data_dir / archive.ARCHIVES / crawl_id
    moved: list[Path] = []
    try:
        with transaction.atomic():
            crawl = create_crawl(org, crawl_id, staged, now)
            imported = Imported(crawl)
            target.mkdir(mode=0o700, parents=True)
            for item in staged:
                imported.files.append(keep(crawl, item, staging, target, now, moved))
                imported.pages += add_pages(crawl, item, now)
                if item.signed:
                    imported.signed.append(item.name)
            crawl.record_imported_pages(imported.pages)
    except BaseException:
        for path in moved:
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            target.rmdir()
        raise
    log.info("org %s: imported %d file(s) as crawl %s", org.slug, len(staged), crawl.short_id)
    # As the runner does for what it keeps: a signed WACZ's signature checked, the result on
    # its row (an archive that does not verify is still imported, and says so).
    provenance.verify_kept(imported.files, settings, now)
    for row in imported.files:
        row.refresh_from_db()
    return imported


def create_crawl(org: Org, crawl_id: str, staged: list[Staged], now: dt.datetime) -> Crawl:
    first = next((item.pages[0].get("url") for item in staged if item.pages), None)
    if not isinstance(first, str):  # no page: its first record's URL, shown where seeds are
        first = next((item.first_url for item in staged if item.first_url), "about:blank")
    seeds = [first]
    # Not validated: a page URL of someone else's archive need not be one archiver would crawl.
    config = CrawlConfig.model_construct(seeds=seeds).model_dump(mode="json")
    return Crawl.objects.create(
        id=crawl_id, org=org, seeds=seeds, config=config, origin=CrawlOrigin.IMPORT,
        status=CrawlStatus.COMPLETE, retry_at=None, created_at=now, updated_at=now,
        started_at=now, finished_at=now, size_bytes=sum(item.size for item in staged))


def keep(crawl: Crawl, item: Staged, staging: Path, target: Path, now: dt.datetime,
         moved: list[Path]) -> CrawlFile:
    """The staged WACZ moved into archives/<crawl>/ and recorded (the org's bytes grown)."""
    destination = target / item.name
    try:
        os.link(staging / item.name, destination)  # never over an existing file
    except OSError as exc:
        if exc.errno != errno.EXDEV:  # archives/ on another disk: copied
            raise
        with open(staging / item.name, "rb") as src, open_new(destination) as dst:
            shutil.copyfileobj(src, dst, archive.CHUNK)
            os.fsync(dst.fileno())
    moved.append(destination)
    path = f"{archive.ARCHIVES}/{crawl.pk}/{item.name}"
    row, _created = archive.record(crawl, path, item.size, item.sha256, now,
                                   root=str(target.parent.parent))
    return row


def add_pages(crawl: Crawl, item: Staged, now: dt.datetime) -> int:
    """A Snapshot per page the WACZ lists (its first entry per URL), named after it."""
    rows = {}
    for page in item.pages:
        url = page.get("url")
        if isinstance(url, str) and url and url not in rows and "format" not in page:
            row = snapshot_from(crawl, page, now)
            row.filename = item.name
            rows[url] = row
    upsert(list(rows.values()), ["filename"])
    return len(rows)

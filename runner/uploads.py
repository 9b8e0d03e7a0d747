"""Archives in object storage: what crawlers uploaded, recorded once (docs/storage.md).

With ARCHIVER_STORAGE_URL=s3://bucket/prefix every crawler instance gets the upload contract
of the real browsertrix-crawler in its environment (`crawler_env`): it uploads each
session's WACZ to `<prefix>/<crawl>/<name>` and RPUSHes a report to `<crawl>:uploads` in the
crawl's Redis database. After every instance exit (and before the crawl's Redis database is
flushed) the runner reads those reports:

    kept, removed = keep_uploaded(rt, crawl, process, now)   # an exited instance
    kept = record_reports(rt, crawl, now)                    # the reports alone
    kept = record_unreported(rt, crawl, now)                 # objects no report named

Exactly once, whatever is killed when: the reports are read without being removed (LRANGE),
each is recorded with get_or_create on its key (the CrawlFile's unique `path`) in one
transaction with the org's bytes, and only then are the handled reports trimmed (LTRIM). A
runner killed between the record and the trim reads the same reports again and finds their
rows: nothing is counted twice, nothing is lost.

A report is hostile input (the crawler runs whatever the web sends it): it must be a JSON
object of this crawl with a plain `.wacz` name, a size within ARCHIVER_ARCHIVE_MAX_BYTES and
a hex SHA-256; the key is ours (the crawl's prefix + that name, so a report cannot claim
another crawl's object), and the object must exist with the reported size (HEAD) before it
is recorded. A report that fails a check is said in the crawl's log and dropped; one that
could not be checked because the store is away stays for the next look.

An upload can also go unreported: its crawler (or its host) died between the upload and the
RPUSH. Once no instance of the crawl can still report (the handover of an adopted crawl, the
crawl's end), the crawl's prefix is listed and each object no row records gets the same
checks on the object itself, its SHA-256 measured by reading it back (record_unreported).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from archiver.conf import S3Target
from crawls import storage
from crawls.models import Crawl, CrawlFile, Process
from runner import archive, wacz_members

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.wacz")
SHA256 = re.compile(r"[0-9a-f]{64}")
BATCH = 100  # reports read at once
MAX_BATCHES = 20  # per call, so a flood of reports cannot hold the tick
MAX_REPORT_BYTES = 16384


class BadReport(ValueError):
    """A report (or an object nobody reported) the runner will not record; the message says
    why (for the crawl's log)."""


@dataclass(frozen=True)
class Report:
    name: str  # the object's name under the crawl's prefix
    size: int
    sha256: str
    completed: bool


def reports_key(crawl_id: str) -> str:
    return f"{crawl_id}:uploads"


def crawler_env(target: S3Target, crawl_id: str, hostname: str, process_id: int) -> dict[str, str]:
    """The STORE_* variables of one instance (WEBHOOK_URL is added by the launcher, which
    knows the Redis host the instance reaches). Secrets: environment only, never logged."""
    return {
        "STORE_ENDPOINT_URL": f"{target.endpoint}/{target.bucket}/",
        "STORE_PATH": target.crawl_prefix(crawl_id),
        "STORE_ACCESS_KEY": target.crawler_access_key,
        "STORE_SECRET_KEY": target.crawler_secret_key,
        "STORE_REGION": target.region,
        # One name per session: the Process row and the time, so no upload replaces another.
        "STORE_FILENAME": f"@ts-{hostname}-{process_id}.wacz",
    }


def parse_report(raw: str | bytes, crawl_id: str, max_bytes: int) -> Report:
    """The report's checked fields, or BadReport."""
    if len(raw) > MAX_REPORT_BYTES:
        raise BadReport(f"an upload report of {len(raw)} bytes")
    try:
        body = json.loads(raw)
    except ValueError:
        raise BadReport("an upload report that is not JSON") from None
    if not isinstance(body, dict):
        raise BadReport("an upload report that is not a JSON object")
    if body.get("id") != crawl_id:
        raise BadReport(f"an upload report of another crawl ({str(body.get('id'))[:40]!r})")
    name, size, digest = body.get("path"), body.get("size"), body.get("hash")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadReport(f"an upload report naming {str(name)[:100]!r}, not a plain .wacz name")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= max_bytes:
        raise BadReport(f"{name}: a size of {str(size)[:30]!r} (1 to {max_bytes} bytes)")
    if "bytes" in body and body["bytes"] != size:
        raise BadReport(f"{name}: `bytes` and `size` differ")
    digest = digest.removeprefix("sha256:") if isinstance(digest, str) else ""
    if not SHA256.fullmatch(digest):
        raise BadReport(f"{name}: no hex SHA-256 in `hash`")
    completed = body.get("completed", True)
    return Report(name=name, size=size, sha256=digest, completed=completed is not False)


def record_reports(rt, crawl: Crawl, now: dt.datetime) -> archive.Kept:
    """Record every reported upload of the crawl that checks out; see the module's notes.
    The store or Redis being away leaves the reports for the next look."""
    kept = archive.Kept()
    target, objects = rt.settings.s3, storage.object_store(rt.settings)
    if target is None or crawl.redis_db is None:
        return kept
    client, key = rt.store.client(crawl.redis_db), reports_key(crawl.pk)
    try:
        for _ in range(MAX_BATCHES):
            reports = client.lrange(key, 0, BATCH - 1)
            handled = record_batch(crawl, reports, target, objects, now, kept,
                                   rt.settings.archive_max_bytes)
            if handled:
                client.ltrim(key, handled, -1)  # only now: a kill before this re-reads them
            if handled < BATCH:
                break
    except (redis.RedisError, storage.StorageError) as exc:
        archive.warn(crawl.pk, kept.warnings, f"uploads not recorded yet: {exc}"
                     if isinstance(exc, storage.StorageError) else
                     f"uploads not recorded yet: Redis failed ({type(exc).__name__})")
    return kept


def record_batch(crawl: Crawl, reports: list, target: S3Target, objects, now: dt.datetime,
                 kept: archive.Kept, max_bytes: int) -> int:
    """How many of `reports` (from the head of the list) were handled: recorded, or refused
    for good. StorageError stops here, leaving the rest."""
    for handled, raw in enumerate(reports):
        try:
            report = parse_report(raw, crawl.pk, max_bytes)
        except BadReport as exc:
            archive.warn(crawl.pk, kept.warnings, f"{exc}; not recorded")
            continue
        name = target.crawl_prefix(crawl.pk) + report.name
        try:
            size = objects.head(name)
        except storage.StorageError:
            if handled:
                return handled
            raise
        if size != report.size:
            what = "no such object" if size is None else f"the object has {size} bytes"
            archive.warn(crawl.pk, kept.warnings, f"upload {report.name} reported {report.size} "
                         f"bytes but {what}; not recorded")
            continue
        row, created = archive.record(crawl, name, report.size, report.sha256, now, root=target.root)
        if created:
            kept.added_bytes += row.size
            log.info("crawl %s: recorded s3://%s/%s (%d bytes)", crawl.short_id, target.bucket,
                     name, row.size)
        kept.files.append(row)
    return len(reports)


def record_unreported(rt, crawl: Crawl, now: dt.datetime) -> archive.Kept:
    """Record the objects under the crawl's prefix that no row records: an upload whose
    crawler (or host) died before its report was pushed, or whose report was lost. Each gets
    the checks a report gets, on what the object itself is (checked_object: a plain `.wacz`
    name, a size within ARCHIVER_ARCHIVE_MAX_BYTES, a WACZ; its SHA-256 measured here); one
    that fails them is said in `warnings` and left in the bucket, never deleted. Only once
    the crawl's instances are gone (the handover, the crawl's end): a live crawler's upload
    is still to be reported. StorageError when the store does not answer."""
    kept = archive.Kept()
    target, objects = rt.settings.s3, storage.object_store(rt.settings)
    if target is None:
        return kept
    prefix, limits = target.crawl_prefix(crawl.pk), archive.Limits.of(rt.settings)
    recorded = set(CrawlFile.objects.filter(path__startswith=prefix).values_list("path", flat=True))
    # A file the runner kept itself and is moving to the bucket (push_kept) has its row.
    pushed = {path.rsplit("/", 1)[-1] for path in crawl.files.exclude(
        root__startswith="s3://").values_list("path", flat=True)}
    for key, size in objects.listing(prefix, limits.folder_entries):
        name = key[len(prefix):]
        if key in recorded or name in pushed:
            continue
        try:
            digest = checked_object(objects, key, name, size, limits)
        except BadReport as exc:
            archive.warn(crawl.pk, kept.warnings, f"an upload nobody reported: {exc}; "
                         "not recorded, left in the bucket")
            continue
        row, created = archive.record(crawl, key, size, digest, now, root=target.root)
        if created:
            kept.added_bytes += row.size
            log.info("crawl %s: recorded s3://%s/%s (%d bytes), an upload nobody reported",
                     crawl.short_id, target.bucket, key, row.size)
        kept.files.append(row)
    return kept


def checked_object(objects, key: str, name: str, size: int, limits: archive.Limits) -> str:
    """The SHA-256 of an object that is a WACZ of the crawl (`name`: its key under the
    crawl's prefix), read back whole; BadReport saying why it is not."""
    if not NAME.fullmatch(name):
        raise BadReport(f"{name[:100]!r} is not a plain .wacz name")
    if not 0 < size <= limits.file_bytes:
        raise BadReport(f"{name}: {size} bytes (1 to {limits.file_bytes})")
    try:
        with objects.open(key, size) as handle:
            members = {member for member, _size in wacz_members.zip_members(handle, size, limits)}
    except archive.Refused as exc:
        raise BadReport(f"{name}: {exc}") from None
    if "datapackage.json" not in members:
        raise BadReport(f"{name}: not a WACZ (no datapackage.json)")
    digest, read = hashlib.sha256(), 0
    for chunk in objects.read(key, 0, size - 1):
        digest.update(chunk)
        read += len(chunk)
    if read != size:
        raise BadReport(f"{name}: {read} of its {size} bytes could be read")
    return digest.hexdigest()


def keep_uploaded(rt, crawl: Crawl, process: Process, now: dt.datetime,
                  pages: Callable[[str, Iterator[dict]], None] | None = None,
                  ) -> tuple[archive.Kept, archive.Removed | None]:
    """What an exited instance uploaded, recorded; then, when the session's WACZ left in its
    collection is one of the crawl's recorded files (same SHA-256), `pages` is given that
    file's key and the WACZ's page entries, what that WACZ holds is forgotten in the
    instance's folder and the WACZ deleted, as collect_session() does with a local archive.
    A WACZ that was not uploaded stays, and so do its WARCs: the next session packs them
    again, or the crawl's end keeps them (keep.keep_leftovers)."""
    kept = record_reports(rt, crawl, now)
    keys = dict(crawl.files.values_list("sha256", "path"))

    def seen(digest: str, entries: Iterator[dict]) -> None:
        pages(keys[digest], entries)

    removed = archive.forget_uploaded(rt.settings.data_dir, crawl.pk, process.instance, set(keys),
                                      archive.Limits.of(rt.settings, rt.stop_event),
                                      seen if pages else None)
    return kept, removed


def push_kept(rt, crawl: Crawl, now: dt.datetime) -> list[str]:
    """With object storage, the files the runner itself kept under the data dir (WARCs a
    crawler left unpackaged, kept by keep.keep_leftovers at the crawl's end) go to the bucket too,
    so every archive of the crawl is where the others are. Per file: upload, HEAD (same
    size), delete the local file, then point the row at the object. A crash after the delete
    leaves a row whose file is gone but whose object exists: the next call finds the object
    and points the row at it; nothing is recorded twice. The warnings, for the crawl's log."""
    target, objects = rt.settings.s3, storage.object_store(rt.settings)
    warnings: list[str] = []
    for row in crawl.files.exclude(root__startswith="s3://"):
        try:
            push_one(rt, crawl, row, target, objects)
        except (archive.Refused, OSError, storage.StorageError) as exc:
            archive.warn(crawl.pk, warnings, f"{row.path} stays under the data dir: {exc}")
    return warnings


def push_one(rt, crawl: Crawl, row, target: S3Target, objects) -> None:
    parts = archive.kept_parts(row)
    key = target.crawl_prefix(crawl.pk) + parts[-1]
    limits = archive.Limits.of(rt.settings)
    with archive.folder(rt.settings.data_dir, *parts[:-1]) as folder:
        try:
            with archive.regular_file(folder, parts[-1], limits.file_bytes) as (fd, st):
                if st.st_size != row.size:
                    raise archive.Refused(f"it has {st.st_size} bytes, its record {row.size}")
                with open(os.dup(fd), "rb") as handle:
                    objects.write(key, handle, st.st_size)
                if objects.head(key) != row.size:
                    raise storage.StorageError(f"object storage: s3://{target.bucket}/{key} "
                                               "does not have the size uploaded")
                archive.remove_checked(folder, parts[-1], st)
        except FileNotFoundError:
            if objects.head(key) != row.size:  # not uploaded before a crash either
                raise
    type(row).objects.filter(pk=row.pk, path=row.path).update(path=key, root=target.root)
    log.info("crawl %s: moved %s to s3://%s/%s", crawl.short_id, row.path, target.bucket, key)

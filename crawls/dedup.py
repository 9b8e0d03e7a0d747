"""Deduplication across an org's crawls (docs/storage.md, "Deduplication").

Kept WACZs are read here, off the supervise tick (runner/steps/periodic.py): the payload
digests of their responses go into PayloadDigest (first holder wins), the archives their
datapackage.json requires into FileDependency. Before a deduplicating crawl's launch the
org's digests are handed to its crawler in Redis (`<crawl id>:dedup`, see the crawler's
dedup.py). Deleting an archive others require is refused, naming them.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
from datetime import UTC, datetime

from archiver.errors import ArchiverError
from crawls import storage
from crawls.downloads import file_name
from crawls.models import CrawlFile, FileDependency, PayloadDigest
from crawls.retention import kept_path

INDEX_NAMES = ("indexes/index.cdxj", "indexes/index.cdx")
BATCH = 2000
FILES_PER_PASS = 2  # a pass stays short; the next one goes on with the rest
_HANDED = 5000  # digests per HSET when filling a crawler's Redis


def open_kept(crawl_file: CrawlFile, settings):
    if storage.is_object(crawl_file):
        store = storage.object_store(settings)
        if store is None:
            raise OSError("its bucket is not configured here")
        return store.open(crawl_file.path, crawl_file.size)
    return open(kept_path(settings.data_dir, crawl_file.path), "rb")  # noqa: SIM115


def _stamp_date(stamp: str) -> str:
    """A CDXJ timestamp (14 digits) as a WARC-Date."""
    return datetime.strptime(stamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def index_lines(zf: zipfile.ZipFile):
    """(digest, url, date) of each whole 200 response in the WACZ's CDXJ index."""
    name = next((n for n in INDEX_NAMES if n in zf.namelist()), None)
    if name is None:
        return
    with zf.open(name) as fh:
        for raw in fh:
            parts = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 2)
            if len(parts) < 3:
                continue
            try:
                fields = json.loads(parts[2])
            except ValueError:
                continue
            if (fields.get("mime") == "warc/revisit" or str(fields.get("status")) != "200"
                    or not fields.get("digest") or not fields.get("url")):
                continue
            digest = fields["digest"]
            if ":" not in digest:
                digest = "sha1:" + digest  # cdxj-indexer drops the prefix
            yield digest, fields["url"], _stamp_date(parts[1])


def index_file(crawl_file: CrawlFile, settings) -> None:
    """Record one kept WACZ's payloads and requirements (again is harmless)."""
    with open_kept(crawl_file, settings) as fh, zipfile.ZipFile(fh) as zf:
        rows: list[tuple[str, str, str]] = []
        for row in index_lines(zf):
            rows.append(row)
            if len(rows) >= BATCH:
                PayloadDigest.add_batch(crawl_file, rows)
                rows = []
        if rows:
            PayloadDigest.add_batch(crawl_file, rows)
        with contextlib.suppress(KeyError, ValueError):
            package = json.loads(zf.read("datapackage.json"))
            hashes = [r.get("hash", "").removeprefix("sha256:")
                      for r in package.get("relation", {}).get("requires", [])]
            required = CrawlFile.objects.filter(crawl__org_id=crawl_file.crawl.org_id,
                                                sha256__in=[h for h in hashes if h])
            FileDependency.record(crawl_file, list(required))
    crawl_file.mark_payloads_indexed()


def index_pending(settings, limit: int = FILES_PER_PASS) -> int:
    """Index up to `limit` kept files not yet indexed; how many were done. A file that
    cannot be read now (bucket away) is left for a later pass."""
    done = 0
    pending = CrawlFile.objects.filter(payloads_indexed=False).select_related("crawl")
    for crawl_file in pending.order_by("created_at", "pk")[:limit]:
        try:
            index_file(crawl_file, settings)
        except (OSError, zipfile.BadZipFile, ArchiverError):
            continue
        done += 1
    return done


def requirement(crawl_file: CrawlFile) -> dict:
    """How a WACZ's relation.requires names a kept archive."""
    return {"filename": file_name(crawl_file), "hash": f"sha256:{crawl_file.sha256}",
            "crawlId": crawl_file.crawl_id}


def hand_to_crawler(client, crawl) -> int:
    """Fill `<crawl id>:dedup` (digest -> "<date> <file pk> <url>") and `<crawl id>:dedup:files`
    for the crawler; how many digests. Replaces what a previous launch left."""
    key, files_key = f"{crawl.pk}:dedup", f"{crawl.pk}:dedup:files"
    client.delete(key, files_key)
    digests = (PayloadDigest.objects.filter(org_id=crawl.org_id)
               .exclude(crawl_file__crawl_id=crawl.pk)
               .values_list("digest", "date", "crawl_file_id", "url"))
    total, chunk, file_ids = 0, {}, set()
    for digest, date, file_id, url in digests.iterator(chunk_size=_HANDED):
        chunk[digest] = f"{date} {file_id} {url}"
        file_ids.add(file_id)
        if len(chunk) >= _HANDED:
            client.hset(key, mapping=chunk)
            total, chunk = total + len(chunk), {}
    if chunk:
        client.hset(key, mapping=chunk)
        total += len(chunk)
    if file_ids:
        client.hset(files_key, mapping={
            str(f.pk): json.dumps(requirement(f))
            for f in CrawlFile.objects.filter(pk__in=file_ids)})
    return total


def with_required(files: list[CrawlFile]) -> list[CrawlFile]:
    """`files` and every kept file they require, directly or not, each once (for replay)."""
    seen = {f.pk: f for f in files}
    frontier = list(seen)
    while frontier:
        found = CrawlFile.objects.filter(required_by_links__file_id__in=frontier).exclude(
            pk__in=list(seen))
        frontier = []
        for f in found:
            if f.pk not in seen:
                seen[f.pk] = f
                frontier.append(f.pk)
    return list(seen.values())


def replay_resources(files: list[CrawlFile], url_of) -> dict:
    """The multi-WACZ package (Browsertrix replay.json shape) listing `files`."""
    return {"profile": "multi-wacz-package", "resources": [
        {"name": file_name(f), "path": url_of(f), "hash": f"sha256:{f.sha256}",
         "size": f.size, "crawlId": f.crawl_id} for f in files]}

"""Deduplication across an org's crawls (docs/storage.md, "Deduplication").

Kept WACZs are read here, off the supervise tick (runner/steps/periodic.py): the payload
digests of their responses go into PayloadDigest (first holder wins), the archives their
datapackage.json requires into FileDependency. Before a deduplicating crawl's launch the
org's digests are handed to its crawler in Redis: `<crawl id>:dedup` for archiver's (see the
crawler's dedup.py), the index layout of its own for browsertrix-crawler; archiver's also
gets `<crawl id>:dedup:urls`, the validators (ETag, Last-Modified) of the URLs kept with
them, for conditional GETs. Deleting an archive others require is refused, naming them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import zipfile
import zlib
from datetime import UTC, datetime, timedelta

from django.db.models import Count, Q, Sum
from django.db.models.functions import Length
from django.utils import timezone

from archiver.errors import ArchiverError
from crawls import storage
from crawls.downloads import file_name, package_name
from crawls.models import CrawlFile, FileDependency, PayloadDigest
from crawls.retention import kept_path

INDEX_NAMES = ("indexes/index.cdxj", "indexes/index.cdx")
BATCH = 2000
FILES_PER_PASS = 2  # a pass stays short; the next one goes on with the rest
RETRY = timedelta(minutes=30)  # a file that could not be read is tried again after this
_HANDED = 5000  # digests per HSET when filling a crawler's Redis
DIGEST_MAX = PayloadDigest._meta.get_field("digest").max_length
MIME_MAX = PayloadDigest._meta.get_field("mime").max_length
ETAG_MAX = PayloadDigest._meta.get_field("etag").max_length
MODIFIED_MAX = PayloadDigest._meta.get_field("last_modified").max_length
log = logging.getLogger(__name__)


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


def index_lines(zf: zipfile.ZipFile, revisited: set[str] | None = None,
                validators: dict[str, tuple[str, str, str]] | None = None):
    """(digest, url, date) of each whole 200 response in the WACZ's CDXJ index; the digests
    its revisit records name go into `revisited`, and (mime, ETag, Last-Modified) of a
    response whose line gives a validator into `validators`, by digest."""
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
                date = _stamp_date(parts[1])
            except ValueError:
                continue
            digest = digest_of(fields)
            if digest is None:
                continue
            url = fields.get("url")
            if fields.get("mime") == "warc/revisit":
                if revisited is not None:
                    revisited.add(digest)
            elif str(fields.get("status")) == "200" and isinstance(url, str) and url:
                if validators is not None:
                    found = validators_of(fields)
                    if found is not None:
                        validators[digest] = found
                yield digest, url, date


def digest_of(fields) -> str | None:
    """The payload digest an index line's fields name, with its algorithm; None when they
    name none. The index is the crawler's writing: a line of the wrong shape is skipped."""
    digest = fields.get("digest") if isinstance(fields, dict) else None
    if not digest or not isinstance(digest, str):
        return None
    if ":" not in digest:  # cdxj-indexer drops the prefix; 64 hex digits are sha256's
        digest = ("sha256:" if len(digest) == 64 else "sha1:") + digest
    return digest if len(digest) <= DIGEST_MAX else None


def validators_of(fields: dict) -> tuple[str, str, str] | None:
    """(mime, ETag, Last-Modified) of an index line that gives a validator (archiver's
    crawler writes `etag` / `lastModified`), each bounded as its column; None otherwise."""
    values = []
    for key, limit in (("mime", MIME_MAX), ("etag", ETAG_MAX), ("lastModified", MODIFIED_MAX)):
        value = fields.get(key)
        ok = isinstance(value, str) and len(value) <= limit and not set(value) & {"\r", "\n"}
        values.append(value if ok else "")
    return tuple(values) if values[1] or values[2] else None


def index_file(crawl_file: CrawlFile, settings) -> None:
    """Record one kept WACZ's payloads and requirements (again is harmless)."""
    revisited: set[str] = set()
    validators: dict[str, tuple[str, str, str]] = {}
    with open_kept(crawl_file, settings) as fh, zipfile.ZipFile(fh) as zf:
        rows: list[tuple[str, ...]] = []
        for row in index_lines(zf, revisited, validators):
            rows.append(row + validators.pop(row[0], ()))
            if len(rows) >= BATCH:
                PayloadDigest.add_batch(crawl_file, rows)
                rows = []
        if rows:
            PayloadDigest.add_batch(crawl_file, rows)
        with contextlib.suppress(KeyError, ValueError, AttributeError, TypeError):
            package = json.loads(zf.read("datapackage.json"))
            hashes = {r.get("hash", "").removeprefix("sha256:")
                      for r in package.get("relation", {}).get("requires", [])} - {""}
            FileDependency.record(crawl_file, required(crawl_file, hashes, revisited))
    crawl_file.mark_payloads_indexed()


def required(crawl_file: CrawlFile, hashes: set[str], revisited: set[str]) -> list[CrawlFile]:
    """The org's kept files of those `hashes` that hold one of the `revisited` payloads.
    What a WACZ requires is the crawler's word: an archive it names but does not revisit is
    no dependency, so a crawler cannot pin another crawl's archive against deletion or reach
    it in replay. Queried in slices: the lists are as long as the crawler made them, and a
    database takes only so many parameters in one query (SQLite's limit is a build option)."""
    org = crawl_file.crawl.org_id
    named = {f.pk: f for part in _slices(hashes)
             for f in CrawlFile.objects.filter(crawl__org_id=org, sha256__in=part)}
    holders: set = set()
    for part in _slices(revisited):
        if named.keys() <= holders:
            break
        holders.update(PayloadDigest.objects.filter(org_id=org, digest__in=part)
                       .values_list("crawl_file_id", flat=True).distinct())
    return [f for pk, f in named.items() if pk in holders]


def _slices(values: set[str], size: int = 500):
    ordered = sorted(values)
    for start in range(0, len(ordered), size):
        yield ordered[start:start + size]


def index_pending(settings, limit: int = FILES_PER_PASS) -> int:
    """Index up to `limit` kept files not yet indexed; how many were done. A file that
    cannot be read (bucket away, gone from disk, corrupt) waits RETRY while the next ones
    go on: the oldest files come first, and two unreadable ones held up every later one."""
    done, now = 0, timezone.now()
    pending = (CrawlFile.objects.filter(payloads_indexed=False)
               .filter(Q(payloads_retry_at__isnull=True) | Q(payloads_retry_at__lte=now))
               .select_related("crawl"))
    for crawl_file in pending.order_by("created_at", "pk")[:limit]:
        try:
            index_file(crawl_file, settings)
        except (OSError, EOFError, zlib.error, zipfile.BadZipFile, ArchiverError) as exc:
            log.warning("crawl %s: cannot read %s for deduplication (%s); again in %s",
                        crawl_file.crawl_id, crawl_file.path, exc, RETRY)
            crawl_file.payloads_failed(now + RETRY)
            continue
        done += 1
    return done


def requirement(crawl_file: CrawlFile) -> dict:
    """How a WACZ's relation.requires names a kept archive."""
    return {"filename": package_name(crawl_file.crawl_id, file_name(crawl_file)),
            "hash": f"sha256:{crawl_file.sha256}",
            "crawlId": crawl_file.crawl_id}


def known_payloads(crawl):
    """The payloads the org kept, but in `crawl`'s own files: the newest archives' first."""
    return (PayloadDigest.objects.filter(org_id=crawl.org_id)
            .exclude(crawl_file__crawl_id=crawl.pk)
            .order_by("-crawl_file__created_at", "-crawl_file_id"))


def index_bytes(crawl, limit: int | None, browsertrix: bool) -> int:
    """About what handing up to `limit` payloads takes in Redis: per payload its URL and
    the rest of its entry (measured by bench/dedup_handing.py: 140 and 290 bytes beside a
    60-byte URL; browsertrix-crawler's layout holds each digest twice), and for archiver's
    crawler each URL kept with validators once more (its JSON entry, estimated)."""
    rows = known_payloads(crawl)
    rows = rows[:limit] if limit is not None else rows
    found = PayloadDigest.objects.filter(pk__in=rows.values("pk")).aggregate(
        n=Count("pk"), url=Sum(Length("url")),
        validated=Count("pk", filter=~Q(etag="") | ~Q(last_modified="")))
    # archiver's crawler also gets each URL kept with validators (~200 bytes and the URL).
    urls = 0 if browsertrix else found["validated"] * 260
    return found["n"] * (300 if browsertrix else 150) + (found["url"] or 0) + urls


def _known(crawl, limit: int | None, *fields: str):
    """(digest, date, file id, source crawl id, url, *fields) of the first `limit` known
    payloads."""
    rows = known_payloads(crawl).values_list("digest", "date", "crawl_file_id",
                                             "crawl_file__crawl_id", "url", *fields)
    return (rows[:limit] if limit is not None else rows).iterator(chunk_size=_HANDED)


def hand_to_crawler(client, crawl, limit: int | None = None) -> int:
    """Fill `<crawl id>:dedup` (digest -> "<date> <file pk> <url>"), `<crawl id>:dedup:urls`
    (a URL kept with validators -> its newest record, for conditional GETs) and
    `<crawl id>:dedup:files` for archiver's crawler, with up to `limit` payloads; how many.
    Replaces what a previous launch left."""
    drop_handed(client, crawl)
    files_key = f"{crawl.pk}:dedup:files"
    total, chunk, urls, file_ids = 0, {}, {}, set()
    seen_urls: set[str] = set()  # newest first: a URL's older records are not its validators
    for digest, date, file_id, _, url, mime, etag, modified in _known(
            crawl, limit, "mime", "etag", "last_modified"):
        chunk[digest] = f"{date} {file_id} {url}"
        file_ids.add(file_id)
        if (etag or modified) and url not in seen_urls:
            urls[url] = json.dumps({"digest": digest, "date": date, "file": str(file_id),
                                    "mime": mime, "etag": etag, "lastModified": modified})
        seen_urls.add(url)
        if len(chunk) >= _HANDED:
            _write_crawler(client, crawl, chunk, urls)
            total, chunk, urls = total + len(chunk), {}, {}
    _write_crawler(client, crawl, chunk, urls)
    total += len(chunk)
    if file_ids:
        client.hset(files_key, mapping={
            str(f.pk): json.dumps(requirement(f))
            for f in CrawlFile.objects.filter(pk__in=file_ids)})
    return total


def _write_crawler(client, crawl, entries: dict, urls: dict) -> None:
    with client.pipeline(transaction=False) as pipe:
        if entries:
            pipe.hset(f"{crawl.pk}:dedup", mapping=entries)
        if urls:
            pipe.hset(f"{crawl.pk}:dedup:urls", mapping=urls)
        pipe.execute()


# browsertrix-crawler's dedup index (1.12 and later; its docs/develop/dedupe.md and
# src/util/state.ts). It looks every payload up in the Redis of its --redisDedupeUrl, which
# defaults to its own crawl's Redis: `alldupes` maps the digest, without its `sha256:`, to a
# crawl id, `h:<that id>` maps it to "<WACZ index> <date, digits only> <URL> <size>", and
# the WACZ index is a position in `c:<that id>:wacz`, whose JSON entries it copies into its
# datapackage.json's relation.requires. So no option is needed: the runner writes that
# layout into the crawl's own Redis database and the crawler reads it there.
BROWSERTRIX_ALL = "alldupes"


def hand_to_browsertrix(client, crawl, limit: int | None = None) -> int:
    """Fill browsertrix-crawler's dedup index with up to `limit` of the org's kept payloads;
    how many.

    Each source crawl is one crawl id of that layout, its kept files its list of WACZs. The
    size is 0: archiver keeps no record sizes, and the crawler uses them only to count the
    bytes it saved. A URL holding a space would break the space-separated value and is left
    out (a crawler URL never holds one unescaped)."""
    drop_handed(client, crawl)
    positions: dict[int, int] = {}  # file id -> its index in its crawl's list
    per_crawl: dict[str, list[int]] = {}
    total, owners, values = 0, {}, {}
    for digest, date, file_id, source, url in _known(crawl, limit):
        if " " in url:
            continue
        if file_id not in positions:
            files = per_crawl.setdefault(source, [])
            positions[file_id] = len(files)
            files.append(file_id)
        key = digest.rsplit(":", 1)[-1]
        owners[key] = source
        stamp = "".join(filter(str.isdigit, date))
        values.setdefault(source, {})[key] = f"{positions[file_id]} {stamp} {url} 0"
        total += 1
        if len(owners) >= _HANDED:
            _write_browsertrix(client, owners, values)
            owners, values = {}, {}
    _write_browsertrix(client, owners, values)
    if per_crawl:
        files = CrawlFile.objects.in_bulk([f for ids in per_crawl.values() for f in ids])
        with client.pipeline(transaction=False) as pipe:
            for source, ids in per_crawl.items():
                pipe.rpush(f"c:{source}:wacz", *(json.dumps(
                    {**requirement(files[i]), "size": files[i].size}) for i in ids))
            pipe.sadd("allcrawls", *per_crawl)
            pipe.execute()
    return total


def drop_handed(client, crawl) -> None:
    """Remove an index handed to the crawl's crawler before, in either layout. Keys of the
    crawl's own id are browsertrix-crawler's, from an earlier session, and stay."""
    own = {f"h:{crawl.pk}", f"h:{crawl.pk}:counts", f"c:{crawl.pk}:wacz"}
    stale = [k for pattern in ("h:*", "c:*:wacz") for k in client.scan_iter(match=pattern)
             if (k.decode() if isinstance(k, bytes) else k) not in own]
    client.delete(f"{crawl.pk}:dedup", f"{crawl.pk}:dedup:files", f"{crawl.pk}:dedup:urls",
                  BROWSERTRIX_ALL, "allcrawls", *stale)


def _write_browsertrix(client, owners: dict, values: dict) -> None:
    if not owners:
        return
    with client.pipeline(transaction=False) as pipe:
        pipe.hset(BROWSERTRIX_ALL, mapping=owners)
        for source, mapping in values.items():
            pipe.hset(f"h:{source}", mapping=mapping)
        pipe.execute()


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
        {"name": package_name(f.crawl_id, file_name(f)), "path": url_of(f), "hash": f"sha256:{f.sha256}",
         "size": f.size, "crawlId": f.crawl_id} for f in files]}

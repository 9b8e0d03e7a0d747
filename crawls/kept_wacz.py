"""Reading kept WACZs, wherever they are kept (the data dir, or the bucket by ranged reads):
their CDXJ index, page lists, screenshots and WARC records, for the diff of two crawls
(crawls/diffing.py) and quality review (runner/qa.py).

A path a crawler wrote is never trusted: members are looked up by name in the zip, and
every read is bounded (MAX_INDEX, MAX_RECORD, MAX_BODY).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import zipfile
import zlib
from dataclasses import dataclass

from archiver_crawler.scope import normalize_url
from django.http import Http404

from archiver import conf
from archiver.errors import ArchiverError
from crawls import storage
from crawls.downloads import open_archive
from crawls.models import PayloadDigest
from crawls.selectors import page_text

INDEX_MEMBERS = ("indexes/index.cdxj", "indexes/index.cdx", "indexes/index.cdx.gz")
PAGE_MEMBERS = ("pages/pages.jsonl", "pages/extraPages.jsonl")
MAX_INDEX = 256 << 20  # bytes of one WACZ's index or page list read
MAX_RECORD = 32 << 20  # bytes of one WARC record read for its body
MAX_BODY = 32 << 20  # bytes of one decompressed body
HTML_TYPES = ("text/html", "application/xhtml+xml")
REVISIT = "warc/revisit"


class DiffRefused(ArchiverError):
    """Two crawls cannot be compared (not kept yet, other orgs, the same crawl) or an archive
    cannot be read; the message says which. `kind` is "state" (not kept yet, an archive
    unreadable) or "invalid" (the same crawl, other orgs), as ActionRefused's."""

    def __init__(self, message: str, kind: str = "state"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Capture:
    """One page of one crawl as its WACZ recorded it."""

    url: str
    digest: str = ""
    mime: str = ""
    status: str = ""
    revisit: bool = False
    file: object = None  # the CrawlFile holding the record
    warc: str = ""
    offset: int = 0
    length: int = 0
    text: str | None = None  # pages.jsonl's, when the crawler wrote it

    @property
    def is_html(self) -> bool:
        return self.mime.split(";")[0].strip().lower() in HTML_TYPES



class Archives(contextlib.ExitStack):
    """The open WACZs of the crawls being compared, and the captures read from them."""

    def __init__(self, settings=None):
        super().__init__()
        self.settings = settings or conf.get()
        self.zips: dict[int, zipfile.ZipFile] = {}
        self.by_digest: dict[str, Capture] = {}

    def open(self, crawl_file) -> zipfile.ZipFile:
        if crawl_file.pk not in self.zips:
            handle = self.enter_context(open_kept(crawl_file, self.settings))
            try:
                self.zips[crawl_file.pk] = self.enter_context(zipfile.ZipFile(handle))
            except (zipfile.BadZipFile, OSError) as exc:
                raise DiffRefused(f"{crawl_file.path} is not a readable WACZ ({exc})") from None
        return self.zips[crawl_file.pk]

    def captures(self, crawl) -> dict[str, Capture]:
        """Every page of the crawl by normalised URL, with its response record."""
        records: dict[str, Capture] = {}
        listed: list[tuple[str, str | None]] = []
        for crawl_file in crawl.files.order_by("created_at", "pk"):
            archive = self.open(crawl_file)
            for url, capture in read_index(archive).items():
                capture.file = crawl_file
                records[url] = capture
                if capture.digest and not capture.revisit:
                    self.by_digest.setdefault(capture.digest, capture)
            listed += read_pages(archive)
        pages: dict[str, Capture] = {}
        for url, text in listed:
            capture = pages.get(url) or records.get(url) or Capture(url)
            if text is not None:
                capture.text = text
            pages[url] = capture
        return pages

    def html(self, capture: Capture) -> str | None:
        """The HTML body of the page's response (a revisit's from the record it names)."""
        source = capture
        if capture.revisit:
            source = self.original(capture)
            if source is None:
                return None
        if source.file is None or not source.warc:
            return None
        try:
            record = read_member_range(self.open(source.file), "archive/" + source.warc,
                                       source.offset, source.length)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError, zlib.error):
            return None
        return http_body_text(record)

    def record(self, capture: Capture) -> bytes | None:
        """The WARC record of a capture (a revisit's: the record it names), or None."""
        source = self.original(capture) if capture.revisit else capture
        if source is None or source.file is None or not source.warc:
            return None
        try:
            return read_member_range(self.open(source.file), "archive/" + source.warc,
                                     source.offset, source.length)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError, zlib.error):
            return None

    def original(self, capture: Capture) -> Capture | None:
        """The record a revisit names: in the crawls compared, or in the archive of the org
        that holds its payload (PayloadDigest), as when both crawls revisit a third."""
        found = self.by_digest.get(capture.digest)
        if found is not None or capture.file is None:
            return found
        prefixed = capture.digest if ":" in capture.digest else "sha1:" + capture.digest
        holder = (PayloadDigest.objects.filter(org_id=capture.file.crawl.org_id,
                                               digest__in={capture.digest, prefixed})
                  .select_related("crawl_file").first())
        if holder is None or holder.crawl_file_id in self.zips:
            return None
        for held in read_index(self.open(holder.crawl_file)).values():
            held.file = holder.crawl_file
            if held.digest and not held.revisit:
                self.by_digest.setdefault(held.digest, held)
        return self.by_digest.get(capture.digest)

    def text(self, capture: Capture) -> str | None:
        if capture.text is not None:
            return capture.text
        html = self.html(capture)
        return None if html is None else page_text(html)


@contextlib.contextmanager
def open_kept(crawl_file, settings):
    """A kept archive as a seekable binary file, wherever it is kept; DiffRefused if gone."""
    if storage.is_object(crawl_file):
        store = storage.object_store(settings)
        if store is None or store.target.root != crawl_file.root:
            raise DiffRefused(f"{crawl_file.path} is in a bucket ARCHIVER_STORAGE_URL does not name")
        try:
            size = store.head(crawl_file.path)
        except storage.StorageError as exc:
            raise DiffRefused(str(exc)) from None
        if size is None:
            raise DiffRefused(f"{crawl_file.path} is not in its bucket")
        handle = store.open(crawl_file.path, size)
    else:
        try:
            handle, _size = open_archive(settings.data_dir, crawl_file.path)
        except Http404:
            raise DiffRefused(f"{crawl_file.path} is not on disk") from None
    with handle:
        yield handle


def read_member(archive: zipfile.ZipFile, name: str, limit: int = MAX_INDEX) -> bytes | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > limit:
        raise DiffRefused(f"{name} in the WACZ is larger than {limit >> 20} MiB")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    return gzip.decompress(data) if name.endswith(".gz") else data


def read_index(archive: zipfile.ZipFile) -> dict[str, Capture]:
    """The response (or revisit) record of every URL the CDXJ index lists; for a URL captured
    more than once, the last."""
    for name in INDEX_MEMBERS:
        data = read_member(archive, name)
        if data is not None:
            break
    else:
        return {}
    records: dict[str, Capture] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        fields = parse_cdxj(line)
        if fields is None:
            continue
        url = normalize_url(str(fields.get("url", "")))
        mime = str(fields.get("mime", ""))
        if url is None or str(fields.get("method", "GET")).upper() != "GET" or mime == "warc/request":
            continue
        records[url] = Capture(
            url, digest=str(fields.get("digest", "")), mime=mime, status=str(fields.get("status", "")),
            revisit=mime == REVISIT, warc=str(fields.get("filename", "")),
            offset=number(fields.get("offset")), length=number(fields.get("length")))
    return records


SCREENSHOT_MIME = {"view": "image/png", "thumbnail": "image/jpeg"}


def screenshots(archive: zipfile.ZipFile, kind: str = "view") -> dict[str, Capture]:
    """The captures' screenshots of a kind (`urn:<kind>:` resource records) by page URL."""
    prefix = f"urn:{kind}:"
    found = {}
    for name in INDEX_MEMBERS:
        data = read_member(archive, name)
        if data is None:
            continue
        for line in data.decode("utf-8", "replace").splitlines():
            fields = parse_cdxj(line)
            url = str(fields.get("url", "")) if fields else ""
            if url.startswith(prefix):
                page = normalize_url(url.removeprefix(prefix))
                if page:
                    found[page] = Capture(
                        page, mime=SCREENSHOT_MIME.get(kind, "image/png"), warc=str(fields.get("filename", "")),
                        offset=number(fields.get("offset")), length=number(fields.get("length")))
        break
    return found


def warc_block(record: bytes) -> bytes | None:
    """The block of a WARC record (its Content-Length bytes after the headers), or None."""
    head, _, block = record.partition(b"\r\n\r\n")
    if not head.startswith(b"WARC/"):
        return None
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return block[:int(value)]
    return None


def parse_cdxj(line: str) -> dict | None:
    parts = line.split(" ", 2)
    if len(parts) < 3 or not parts[2].startswith("{"):
        return None
    try:
        fields = json.loads(parts[2])
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def number(value) -> int:
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def read_pages(archive: zipfile.ZipFile):
    """(normalised URL, text or None) of every page the WACZ's page lists name."""
    for name in PAGE_MEMBERS:
        data = read_member(archive, name)
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "url" not in entry:
                continue  # the header line, or damage
            url = normalize_url(str(entry["url"]))
            if url:
                text = entry.get("text")
                yield url, text if isinstance(text, str) else None


def read_member_range(archive: zipfile.ZipFile, name: str, offset: int, length: int) -> bytes:
    """One WARC record (a gzip member, or plain) at offset..offset+length of a WARC in the zip."""
    if length <= 0 or length > MAX_RECORD:
        raise OSError(f"record length {length} out of bounds")
    with archive.open(name) as member:
        member.seek(offset)
        raw = member.read(length)
    if raw[:2] == b"\x1f\x8b":
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        raw = inflater.decompress(raw, MAX_RECORD)
    return raw


def http_response(record: bytes) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
    """(status, reason, headers, body) of a WARC response record, the body as the server sent
    it (still content-encoded, de-chunked); None when it is not one we can read."""
    block = warc_block(record)
    if block is None:
        return None
    http_head, _, body = block.partition(b"\r\n\r\n")
    lines = http_head.split(b"\r\n")
    status_line = lines[0].decode("latin-1").split(" ", 2)
    if len(status_line) < 2 or not status_line[1].isdigit():
        return None
    headers = []
    for line in lines[1:]:
        key, _, value = line.partition(b":")
        if key.strip():
            headers.append((key.strip().decode("latin-1"), value.strip().decode("latin-1")))
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        body = dechunk(body)
        headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
    return int(status_line[1]), status_line[2] if len(status_line) > 2 else "", headers, body


def http_body_text(record: bytes) -> str | None:
    """The decoded body of a WARC response record, or None when it is not one we can read."""
    warc_head, _, block = record.partition(b"\r\n\r\n")
    if not warc_head.startswith(b"WARC/"):
        return None
    http_head, _, body = block.partition(b"\r\n\r\n")
    headers = {}
    for line in http_head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        headers[key.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = dechunk(body)
    encoding = headers.get("content-encoding", "").lower()
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if "gzip" in encoding else zlib.MAX_WBITS)
            body = inflater.decompress(body, MAX_BODY)
        except zlib.error:
            pass  # already decoded by the crawler, as archiver's own does
    elif encoding not in ("", "identity"):
        return None
    charset = "utf-8"
    for part in headers.get("content-type", "").split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip('"\' ')
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


def dechunk(body: bytes) -> bytes:
    out, position = bytearray(), 0
    while position < len(body):
        end = body.find(b"\r\n", position)
        if end < 0:
            break
        try:
            size = int(body[position:end].split(b";")[0], 16)
        except ValueError:
            return body  # not chunked after all
        if size == 0:
            break
        out += body[end + 2:end + 2 + size]
        position = end + 2 + size + 2
    return bytes(out)

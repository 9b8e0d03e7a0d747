"""A WARC made elsewhere (wget, Heritrix, warcprox, pywb), taken in by `archiver import`.

The file is hostile input, read once, in order, with every read bounded:

    records = rechunk(source, size, out, limits)   # one gzip member per record, or Refused
    pages = find_pages(path, limits)               # HTML 200 responses: url, ts, title, text

rechunk() walks the records itself (WARC/1.x head, Content-Length, CRLF CRLF) instead of
trusting a library to stop: a head over RECORD_HEAD_BYTES, a record longer than what is
left, a gzip stream that is damaged, cut short or inflates past what an archive plausibly
holds (a bomb), or bytes that are no record are each refused with where they were found.
What it writes is the same records, each its own gzip member, which is what replay tools
and cdxj-indexer need to find a record by offset (a WARC gzipped as a whole has no such
offsets). The crawler's packaging (archiver_crawler.wacz.build_wacz) then makes the WACZ.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from archiver_crawler.links import extract_html
from archiver_crawler.warc import url_key

from crawls.models import PAGE_LOADED
from runner.file_guard import CHUNK, Limits, Refused

RECORD_HEAD_BYTES = 64 << 10  # a record's header block (a few hundred bytes in practice)
INFLATION = 20  # a WARC.gz inflating past this many times its size (+ SLACK) is a bomb:
SLACK = 64 << 20  # real ones hold already-compressed images and pages, and inflate 2-5x
HTML_BYTES = 8 << 20  # of a page's body read for its title and text
SECONDS = 600.0  # one file's reading, at most (a slow disk; a bomb is refused long before)


class Inflated:
    """The decompressed bytes of a WARC.gz (every gzip member in turn) or of a plain WARC,
    refused past `most` bytes or when the gzip stream is damaged or cut short."""

    def __init__(self, source: BinaryIO, size: int, gzipped: bool, limits: Limits):
        self.source, self.left, self.gzipped = source, size, gzipped
        self.most = min(limits.file_bytes, size * INFLATION + SLACK) if gzipped else size
        self.stop, self.deadline = limits.stop, time.monotonic() + SECONDS
        self.inflater = zlib.decompressobj(31) if gzipped else None
        self.buffer, self.pending, self.taken, self.produced = b"", b"", 0, 0
        self.fed, self.size = False, size

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n and self.fill():
            pass
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        self.taken += len(data)
        return data

    def readline(self, most: int) -> bytes:
        while b"\n" not in self.buffer[:most] and len(self.buffer) < most and self.fill():
            pass
        end = self.buffer.find(b"\n", 0, most)
        return self.read(end + 1 if end >= 0 else most)

    def fill(self) -> bool:
        """Up to CHUNK more decompressed bytes in the buffer: whether there was progress.
        Input is inflated a bounded piece at a time, so a bomb is refused after `most`
        bytes and never holds more than a few MiB in memory."""
        if self.stop is not None and self.stop.is_set():
            raise Refused("archiver is stopping")
        if time.monotonic() > self.deadline:
            raise Refused(f"reading it took over {SECONDS:g}s")
        if not self.pending:
            self.pending = self.source.read(min(CHUNK, self.left)) if self.left else b""
            self.left -= len(self.pending)
            if not self.pending:
                if self.fed:
                    raise Refused("its gzip is cut short (the last member does not end)")
                return False
        if self.inflater is None:
            data, self.pending = self.pending, b""
        else:
            data = self.inflate()
        self.produced += len(data)
        if self.produced > self.most:
            raise Refused(f"it inflates to over {self.most} bytes (a gzip bomb?)")
        self.buffer += data
        return True

    def inflate(self) -> bytes:
        try:
            self.fed = True
            data = self.inflater.decompress(self.pending, CHUNK)
        except zlib.error as exc:
            raise Refused(f"its gzip is damaged near byte {self.size - self.left} "
                          f"({exc})") from None
        if self.inflater.eof:  # a member ends; the next one starts in what is left
            self.pending, self.fed = self.inflater.unused_data, False
            self.inflater = zlib.decompressobj(31)
        else:
            self.pending = self.inflater.unconsumed_tail
        return data


def rechunk(source: BinaryIO, size: int, gzipped: bool, out: BinaryIO, limits: Limits) -> int:
    """Copy the WARC's records from `source` (its `size` bytes) into `out`, one gzip member
    each; how many. Refused when it is not a whole, sane WARC."""
    data, records = Inflated(source, size, gzipped, limits), 0
    while True:
        while (line := data.readline(RECORD_HEAD_BYTES)) in (b"\r\n", b"\n"):
            pass  # the CRLF CRLF that ends a record (and blank lines some writers add)
        if not line:
            break
        start = data.taken - len(line)
        if not line.startswith(b"WARC/"):
            raise Refused(f"no WARC record at byte {start} (a WARC record starts 'WARC/')")
        head = read_head(data, line, start)
        length = content_length(head, start)
        if length > limits.file_bytes:
            raise Refused(f"the record at byte {start} claims {length} bytes")
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        out.write(packer.compress(head))
        left = length
        while left:
            chunk = data.read(min(CHUNK, left))
            if not chunk:
                raise Refused(f"the record at byte {start} is cut short")
            left -= len(chunk)
            out.write(packer.compress(chunk))
        out.write(packer.compress(b"\r\n\r\n") + packer.flush())
        records += 1
    if not records:
        raise Refused("it holds no WARC record")
    return records


def read_head(data: Inflated, first: bytes, start: int) -> bytes:
    """The record's header block, its blank line included."""
    lines = [first]
    total = len(first)
    while lines[-1] not in (b"\r\n", b"\n"):
        line = data.readline(RECORD_HEAD_BYTES)
        total += len(line)
        if not line or total > RECORD_HEAD_BYTES:
            raise Refused(f"the record at byte {start} has no end to its header "
                          f"within {RECORD_HEAD_BYTES} bytes")
        lines.append(line)
    return b"".join(lines)


def content_length(head: bytes, start: int) -> int:
    for line in head.split(b"\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            with contextlib.suppress(ValueError):
                length = int(value.strip())
                if length >= 0:
                    return length
            break
    raise Refused(f"the record at byte {start} has no valid Content-Length")


def find_pages(path: Path, limits: Limits) -> tuple[list[dict], list[str]]:
    """The pages of a rechunked WARC, in pages.jsonl's form (each URL's first HTML 200
    response, with its title and text, for search, taken from at most HTML_BYTES of its
    body), and its CDXJ index lines, keyed as the crawler keys its own (url_key)."""
    from warcio.archiveiterator import ArchiveIterator  # slow to import; only for imports
    from warcio.exceptions import ArchiveLoadFailed

    pages: dict[str, dict] = {}
    lines: list[str] = []
    try:
        with open(path, "rb") as fh:
            records = ArchiveIterator(fh)
            for record in records:
                page = page_of(record)
                if page is not None and page["url"] not in pages:
                    pages[page["url"]] = page
                    if len(pages) > limits.pages_entries:
                        raise Refused(f"it holds over {limits.pages_entries} pages")
                records.read_to_end(record)
                line = index_line(record, records.get_record_offset(),
                                  records.get_record_length(), path.name)
                if line:
                    lines.append(line)
    except (ArchiveLoadFailed, zlib.error, EOFError, ValueError) as exc:
        raise Refused(f"a record cannot be read ({exc})") from None
    return list(pages.values()), lines


def index_line(record, offset: int, length: int, filename: str) -> str | None:
    """The record's CDXJ line (responses, revisits and resources: what replay looks up)."""
    if record.rec_type not in ("response", "revisit", "resource"):
        return None
    url = record.rec_headers.get_header("WARC-Target-URI") or ""
    date = record.rec_headers.get_header("WARC-Date") or ""
    stamp = "".join(c for c in date if c.isdigit())[:14]
    if not url or len(stamp) != 14:
        return None
    fields = {"url": url}
    if record.rec_type == "revisit":
        fields["mime"] = "warc/revisit"
    elif record.http_headers is not None and record.rec_type == "response":
        fields["mime"] = (record.http_headers.get_header("Content-Type") or "").split(";")[0].strip()
        fields["status"] = record.http_headers.get_statuscode()
    else:
        fields["mime"] = (record.rec_headers.get_header("Content-Type") or "").split(";")[0].strip()
        fields["status"] = "200"
    digest = record.rec_headers.get_header("WARC-Payload-Digest")
    if digest:
        fields["digest"] = digest
    fields.update(length=str(length), offset=str(offset), filename=filename)
    return f"{url_key(url)} {stamp} {json.dumps(fields)}"


def page_of(record) -> dict | None:
    if record.rec_type != "response" or record.http_headers is None:
        return None
    url = record.rec_headers.get_header("WARC-Target-URI") or ""
    mime = (record.http_headers.get_header("Content-Type") or "").split(";")[0].strip().lower()
    if not url.startswith(("http://", "https://")) or mime != "text/html" or \
            record.http_headers.get_statuscode() != "200":
        return None
    body = record.content_stream().read(HTML_BYTES)
    found = extract_html(body, url)
    return {"id": uuid.uuid4().hex, "url": url[:8000],
            "ts": record.rec_headers.get_header("WARC-Date") or "", "title": found.title[:2000],
            "text": found.text, "status": 200, "mime": mime, "loadState": PAGE_LOADED}


def page_lines(pages: list[dict]) -> Iterator[str]:
    """pages.jsonl: the header the crawler writes, then one page a line."""
    yield json.dumps({"format": "json-pages-1.0", "id": "pages", "title": "All Pages",
                      "hasText": True})
    for page in pages:
        yield json.dumps(page)

"""WARC output: one gzipped file per instance and session, request and response (or revisit)
records; a revisit of a GET has no request record.

Records are serialised here rather than with warcio: building them through warcio's objects
(header lists, digesters, its BytesIO plumbing) cost more than fetching the page. The format
is the one warcio writes (sha1 base32 digests, one gzip member per record; no
payload digest on a request record, whose block has no payload), as WARC/1.1: its dates
have milliseconds and its revisits the 1.1 profile, which WARC/1.0 does not allow; the
tests read every record back with warcio and `wacz validate`.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import os
import re
import uuid
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from archiver_crawler import __version__
from archiver_crawler.dedup import (
    NOT_MODIFIED_PROFILE,
    REVISIT_PROFILE,
    Kept,
    KnownPayloads,
    Original,
)
from archiver_crawler.errors import OutOfSpace

logger = logging.getLogger(__name__)

# Headers whose meaning the stored body no longer has (the client undoes the chunking).
_RENAMED = {"transfer-encoding"}
# Any level is the same gzip to a WARC reader. On Python's HTML docs level 3 compresses in
# half level 6's CPU (0.9 against 1.9 s for 64 MB) for 12 % more bytes; level 1 saves only
# 0.2 s more for 20 % more bytes.
GZIP_LEVEL = 3
# A revisit record is ~700 bytes, so any level costs microseconds; 6 takes 5 bytes (of ~460)
# more out of it than 3 (bench/dedup.py's records), 9 nothing more than 6.
REVISIT_GZIP_LEVEL = 6
_NAME = re.compile(r"^rec-\d{17}-(.+)-[0-9a-f]{8}\.warc\.gz$")
# URLs whose key needs no parsing: lower-case host (no www prefix to strip) and path, no
# query, no dot segments, no escapes. Anything else goes through _parsed_key.
_SIMPLE_URL = re.compile(
    r"^(https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*)(?::([1-9]\d*))?((?:/[a-z0-9_-][a-z0-9_.-]*)*/?)$")
_WWW = re.compile(r"^(https?://)www\d*\.")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# A response's validators go into its index line, where the runner's dedup pass reads them
# for the next crawl's conditional GETs (a longer one is no validator worth keeping).
_VALIDATORS = {"etag": "etag", "last-modified": "lastModified"}
_VALIDATOR_MAX = 200


@dataclass
class Exchange:
    """One HTTP request and its response, as fetched."""

    url: str
    method: str
    request_target: str
    request_headers: list[tuple[str, str]]
    http_version: str
    status: int
    reason: str
    response_headers: list[tuple[str, str]]  # as received (bytes decoded as latin-1)
    body: bytes
    date: datetime
    ip: str | None = None


def safe_instance_id(instance_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in instance_id).lower()


def warc_instance(name: str) -> str | None:
    """The instance id part of a WARC name written by WarcFile (rec-<stamp>-<id>-<hex8>)."""
    match = _NAME.match(name)
    return match.group(1) if match else None


_last_second: tuple[datetime | None, str] = (None, "")


def warc_date(when: datetime) -> str:
    """ISO 8601 with milliseconds, in UTC; the seconds part is formatted once per second."""
    global _last_second
    when = when.astimezone(UTC)
    second = when.replace(microsecond=0)
    cached = _last_second  # one read: the packaging thread logs too
    if cached[0] != second:
        cached = _last_second = (second, second.strftime("%Y-%m-%dT%H:%M:%S."))
    return f"{cached[1]}{when.microsecond // 1000:03d}Z"


def iso_now() -> str:
    return warc_date(datetime.now(UTC))


class WarcFile:
    def __init__(self, archive_dir: Path, instance_id: str, collection: str):
        archive_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:17]
        self.name = f"rec-{stamp}-{safe_instance_id(instance_id)}-{uuid.uuid4().hex[:8]}.warc.gz"
        self.path = archive_dir / self.name
        self._fh = open(self.path, "xb")  # noqa: SIM115 - kept open for the whole session
        self._offset = 0
        self._index: list[str] = []
        self._guard(self._write_warcinfo, collection)

    @property
    def size(self) -> int:
        return self._offset

    def _guard(self, fn, *args):
        try:
            result = fn(*args)
            # Flushed per page: once its outcome is in Redis, its records are in the file.
            self._fh.flush()
            return result
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise OutOfSpace(f"no space left writing {self.path}") from exc
            raise

    def _write_warcinfo(self, collection: str) -> None:
        fields = (f"software: archiver-crawler {__version__}\r\nformat: WARC File Format 1.1\r\n"
                  f"isPartOf: {collection}\r\n").encode()
        head = (f"WARC/1.1\r\nWARC-Type: warcinfo\r\nWARC-Record-ID: {_record_id()}\r\n"
                f"WARC-Filename: {self.name}\r\nWARC-Date: {warc_date(datetime.now(UTC))}\r\n"
                f"WARC-Block-Digest: {_sha1(fields)}\r\n"
                f"Content-Type: application/warc-fields\r\nContent-Length: {len(fields)}\r\n\r\n")
        self._emit(head.encode() + fields + b"\r\n\r\n")

    def write(self, ex: Exchange, known: KnownPayloads | None = None) -> bool:
        """Write the exchange; True when its response went in as a revisit record (its
        payload is one `known` has kept already)."""
        return self._guard(self._write_exchange, ex, known)

    def _write_exchange(self, ex: Exchange, known: KnownPayloads | None) -> bool:
        date = warc_date(ex.date)
        ip = f"WARC-IP-Address: {ex.ip}\r\n" if ex.ip else ""
        status_line = f"{ex.http_version} {ex.status} {ex.reason}".rstrip()
        head = _http_head(status_line, [
            (f"X-Archive-Orig-{k}" if k.lower() in _RENAMED else k, v)
            for k, v in ex.response_headers])
        if known is not None and ex.status == 304 and ex.method == "GET":
            kept = known.revisit_of_not_modified(ex.url)
            if kept is not None:
                return self._write_not_modified(ex, date, head, ip, kept)
        response_id = _record_id()
        payload_digest = _sha1(ex.body)
        # Only a whole 200 body is stood for by an earlier copy: an empty body gains nothing,
        # and a redirect or error page is worth keeping as it was.
        original = (known.revisit_of(payload_digest)
                    if known is not None and ex.status == 200 and ex.body else None)
        if original is None:
            response = _record("response", ex.url, date, response_id, head + ex.body,
                               payload_digest, ip)
        else:
            response = _revisit(ex.url, date, response_id, head, payload_digest, ip, original)
        offset, length = self._emit(response, GZIP_LEVEL if original is None else REVISIT_GZIP_LEVEL)
        # A revisit of a GET goes without its request record: a replayer finds a GET by its
        # URL alone (the request is read only to key a POST by its body), and the request
        # headers are the crawler's own, the same every crawl. Its ~470 bytes compressed
        # were half of what a deduplicated page cost (bench/dedup.py).
        if original is None or ex.method != "GET":
            request_block = _http_head(f"{ex.method} {ex.request_target} {ex.http_version}",
                                       ex.request_headers)
            # No WARC-Payload-Digest: the block is the request's headers only, so there is
            # no payload to digest (the sha1 of nothing said nothing, in ~40 bytes).
            self._emit(_record("request", ex.url, date, _record_id(), request_block, None,
                               f"{ip}WARC-Concurrent-To: {response_id}\r\n"))
        self._index.append(self._cdxj_line(ex, payload_digest, offset, length,
                                           revisit=original is not None))
        return original is not None

    def _write_not_modified(self, ex: Exchange, date: str, head: bytes, ip: str,
                            kept: Kept) -> bool:
        """A 304 to a conditional GET: a `server-not-modified` revisit holding the 304's
        headers, referring to the kept record (no request record, as for any GET revisit;
        no payload digest: the 304 carried no payload)."""
        record = _record(
            "revisit", ex.url, date, _record_id(), head, None,
            f"{ip}WARC-Profile: {NOT_MODIFIED_PROFILE}\r\nWARC-Refers-To-Target-URI: {kept.url}\r\n"
            f"WARC-Refers-To-Date: {kept.date}\r\n", content_type="application/http")
        offset, length = self._emit(record, REVISIT_GZIP_LEVEL)
        # The index line names the kept payload and the kept record's status, as an
        # identical-payload revisit's does: the runner's dependency check, diff and QA find
        # the kept record by that digest, and ReplayWeb.page serves a revisit indexed as a
        # 304 as an empty 304 instead of the kept body.
        self._index.append(self._cdxj_line(ex, kept.digest, offset, length, revisit=True,
                                           status=200))
        return True

    def write_resource(self, uri: str, content_type: str, body: bytes, date: datetime,
                       extra_headers: list[tuple[str, str]] = ()) -> None:
        """A `resource` record (a browser's `urn:text:`, `urn:view:`, `urn:pageinfo:` ...)."""
        self._guard(self._write_resource, uri, content_type, body, date, list(extra_headers))

    def _write_resource(self, uri: str, content_type: str, body: bytes, date: datetime,
                        extra_headers: list[tuple[str, str]]) -> None:
        digest = _sha1(body)
        extra = "".join(f"{k}: {v}\r\n" for k, v in extra_headers)
        head = (f"WARC/1.1\r\nWARC-Type: resource\r\nWARC-Record-ID: {_record_id()}\r\n"
                f"WARC-Date: {warc_date(date)}\r\nWARC-Target-URI: {uri}\r\n{extra}"
                f"WARC-Payload-Digest: {digest}\r\nWARC-Block-Digest: {digest}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n")
        offset, length = self._emit(head.encode("utf-8") + body + b"\r\n\r\n")
        stamp = date.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        self._index.append(
            f'{url_key(uri)} {stamp} {{"url": {json.dumps(uri)}, '
            f'"mime": {json.dumps(content_type.split(";")[0].strip())}, "digest": "{digest}", '
            f'"length": "{length}", "offset": "{offset}", "filename": "{self.name}"}}')

    def _emit(self, record: bytes, level: int = GZIP_LEVEL) -> tuple[int, int]:
        """Append one record as a gzip member; returns its offset and compressed length."""
        member = zlib.compress(record, level, wbits=31)
        offset = self._offset
        self._fh.write(member)
        self._offset += len(member)
        return offset, len(member)

    def _cdxj_line(self, ex: Exchange, digest: str, offset: int, length: int,
                   revisit: bool = False, status: int | None = None) -> str:
        """The line cdxj-indexer would write for this response (or revisit) record, with a
        whole 200 response's validators (ETag, Last-Modified) beside."""
        mime = next((v for k, v in ex.response_headers if k.lower() == "content-type"), None)
        extra = ""
        if revisit:
            mime = "warc/revisit"
        elif ex.status == 200:
            extra = "".join(f", {json.dumps(_VALIDATORS[k.lower()])}: {json.dumps(v)}"
                            for k, v in ex.response_headers
                            if k.lower() in _VALIDATORS and 0 < len(v) <= _VALIDATOR_MAX)
        mime_field = f', "mime": {json.dumps(mime.split(";")[0].strip())}' if mime else ""
        stamp = ex.date.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        return (f'{url_key(ex.url)} {stamp} {{"url": {json.dumps(ex.url)}{mime_field}, '
                f'"status": "{status or ex.status}", "digest": "{digest}", "length": "{length}", '
                f'"offset": "{offset}", "filename": "{self.name}"{extra}}}')

    def close(self) -> None:
        """Close the WARC and leave its index beside it (the WACZ then needs no re-read)."""
        if self._fh.closed:
            return
        self._fh.close()
        write_sidecar_index(self.path, self._index)


def _record_id() -> str:
    return f"<urn:uuid:{uuid.uuid4()}>"


def _sha1(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def _http_head(first_line: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [first_line, *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1", "replace")


def _record(kind: str, url: str, date: str, record_id: str, block: bytes,
            payload_digest: str | None, extra: str = "",
            content_type: str | None = None) -> bytes:
    payload = f"WARC-Payload-Digest: {payload_digest}\r\n" if payload_digest else ""
    head = (f"WARC/1.1\r\nWARC-Type: {kind}\r\nWARC-Record-ID: {record_id}\r\n"
            f"WARC-Date: {date}\r\nWARC-Target-URI: {url}\r\n{extra}"
            f"{payload}WARC-Block-Digest: {_sha1(block)}\r\n"
            f"Content-Type: {content_type or 'application/http; msgtype=' + kind}\r\n"
            f"Content-Length: {len(block)}\r\n\r\n")
    return head.encode("utf-8") + block + b"\r\n\r\n"


def _revisit(url: str, date: str, record_id: str, http_head: bytes, payload_digest: str,
             ip: str, original: Original) -> bytes:
    """A revisit record (identical-payload-digest profile): the response's HTTP headers as
    received, its body left out. What each field is for, and what was left out (the figures
    are gzipped bytes of bench/dedup.py's ~460-byte record):

    - WARC-Type, WARC-Record-ID, WARC-Date, WARC-Target-URI, Content-Length: mandatory;
      WARC-IP-Address, when known, as on a response (the spec's "should").
    - WARC-Profile: mandatory on a revisit; WARC-Payload-Digest: mandatory in this profile,
      and what ties the record to the kept payload.
    - WARC-Refers-To-Target-URI and WARC-Refers-To-Date: optional in the spec, but
      ReplayWeb.page (wabac.js 2.x) finds the kept payload by them alone: without the URI it
      serves the revisit's empty body; without the date it looks the URL up at time 0 (its
      earliest capture, whatever its payload); pywb needs the URI when the kept copy is
      under another URL. Kept even when the URI is the record's own.
    - WARC-Truncated: length: the spec's "shall" for a revisit whose block is the truncated
      response (as Heritrix writes it); 11 bytes. No reader we use acts on it.
    - WARC-Block-Digest: optional, kept (37 bytes): the only check of the stored headers.
    - Content-Type "application/http": the spec's "should" for a non-empty block. Its
      `msgtype=response` parameter is optional and says nothing the block's status line and
      the profile ("interpreted the same as a response") do not: dropped, 13 bytes.
    - Not written: WARC-Refers-To (the kept record's id, recommended; the index of kept
      payloads has none to give, and wabac.js does not read it; 32 bytes if it had).
    - The HTTP headers stay whole (the spec recommends keeping them; an empty block would
      save 87 bytes): they are this fetch's own (its Date, and any header that changed
      while the body did not), and replay serves them.
    """
    return _record(
        "revisit", url, date, record_id, http_head, payload_digest,
        f"{ip}WARC-Profile: {REVISIT_PROFILE}\r\nWARC-Refers-To-Target-URI: {original.url}\r\n"
        f"WARC-Refers-To-Date: {original.date}\r\nWARC-Truncated: length\r\n",
        content_type="application/http")


def sidecar_index_path(warc: Path) -> Path:
    return warc.parent.parent / "warc-cdxj" / (warc.name + ".cdxj")


def write_sidecar_index(warc: Path, lines: list[str]) -> None:
    path = sidecar_index_path(warc)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(partial, path)


def url_key(url: str) -> str:
    """The CDXJ key of `url`: the SURT that ReplayWeb.page computes to look a URL up in a
    WACZ's index (warcio.js getSurt, used by wabac.js 2.27 and by browsertrix-crawler's own
    indexer). Its rule: a "www", "www2"... prefix dropped (only as written in lower case),
    the whole URL lower-cased, the host's labels reversed (an IP address's octets too),
    the port only when not the scheme's default, then ")" and the path exactly as the
    browser's URL parser leaves it (trailing slash kept, "//" kept, dot segments resolved,
    escapes kept), then the query's "&"-separated parts sorted; no fragment. Anything but
    http(s) is its own key. The surt package (pywb's rule) differs: it strips a trailing
    slash, so wabac's lookup of ".../gen/" missed the line keyed ".../gen".
    """
    simple = _SIMPLE_URL.match(url)
    if simple:
        scheme, host, port, path = simple.groups()
        if not host.startswith("www") and port != _DEFAULT_PORTS[scheme]:
            return ",".join(reversed(host.split("."))) + (f":{port}" if port else "") + ")" + (
                path or "/")
    if not url.startswith(("http:", "https:")):
        return url
    try:
        return _parsed_key(_WWW.sub(r"\1", url, count=1).lower())
    except ValueError:
        return url  # what getSurt does when the browser's URL parser refuses the URL


# What the WHATWG URL parser percent-encodes in a path and in a special URL's query (beside
# controls and non-ASCII); "%" is left alone, so existing escapes stay as they are.
_PATH_ESCAPED = frozenset(' "#<>?`{}')
_QUERY_ESCAPED = frozenset(' "#<>\'')
_C0_AND_SPACE = "".join(map(chr, range(0x21)))
_SINGLE_DOTS = {".", "%2e"}
_DOUBLE_DOTS = {"..", ".%2e", "%2e.", "%2e%2e"}


def _parsed_key(url: str) -> str:
    """getSurt's key of a lower-cased http(s) URL, parsed as the WHATWG URL parser does for
    the parts getSurt uses. Raises ValueError where that parser would fail."""
    scheme, _, rest = url.partition(":")
    rest = re.sub(r"[\t\n\r]", "", rest.rstrip(_C0_AND_SPACE))
    rest = rest.replace("\\", "/").lstrip("/")
    rest = rest.split("#", 1)[0]
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    port = ""
    if host.startswith("["):
        end = host.find("]")
        tail = host[end + 1:]
        if end < 0 or (tail and not tail.startswith(":")):
            raise ValueError(url)
        host, port = host[:end + 1], tail[1:]
    elif ":" in host:
        host, _, port = host.rpartition(":")
    if not host:
        raise ValueError(url)
    if not host.startswith("[") and not host.isascii():
        host = host.encode("idna").decode("ascii")
    if port:
        if not port.isdigit() or int(port) > 65535:
            raise ValueError(url)
        port = "" if str(int(port)) == _DEFAULT_PORTS[scheme] else f":{int(port)}"
    key = ",".join(reversed(host.split("."))) + port + ")" + _path(path if slash else "")
    if query:
        key += "?" + "&".join(sorted(_escaped(query, _QUERY_ESCAPED).split("&")))
    return key


def _path(path: str) -> str:
    segments: list[str] = []
    parts = path.split("/")
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        if part in _DOUBLE_DOTS:
            if segments:
                segments.pop()
            if last:
                segments.append("")
        elif part in _SINGLE_DOTS:
            if last:
                segments.append("")
        else:
            segments.append(_escaped(part, _PATH_ESCAPED))
    return "/" + "/".join(segments)


def _escaped(text: str, escaped: frozenset[str]) -> str:
    if text.isascii() and text.isprintable() and not escaped.intersection(text):
        return text
    return "".join(
        c if c.isascii() and c.isprintable() and c not in escaped
        else "".join(f"%{b:02X}" for b in c.encode("utf-8")) for c in text)

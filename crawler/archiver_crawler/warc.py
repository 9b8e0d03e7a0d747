"""WARC output: one gzipped file per instance and session, request and response records."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import uuid
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

import surt
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from archiver_crawler import __version__
from archiver_crawler.errors import OutOfSpace

logger = logging.getLogger(__name__)

# Headers whose meaning the stored body no longer has (the client undoes the chunking).
_RENAMED = {"transfer-encoding"}
GZIP_LEVEL = 6
_NAME = re.compile(r"^rec-\d{17}-(.+)-[0-9a-f]{8}\.warc\.gz$")


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
    response_headers: list[tuple[str, str]]
    body: bytes
    date: datetime
    ip: str | None = None


def safe_instance_id(instance_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in instance_id).lower()


def warc_instance(name: str) -> str | None:
    """The instance id part of a WARC name written by WarcFile (rec-<stamp>-<id>-<hex8>)."""
    match = _NAME.match(name)
    return match.group(1) if match else None


def warc_date(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class WarcFile:
    def __init__(self, archive_dir: Path, instance_id: str, collection: str):
        archive_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:17]
        self.name = f"rec-{stamp}-{safe_instance_id(instance_id)}-{uuid.uuid4().hex[:8]}.warc.gz"
        self.path = archive_dir / self.name
        self._fh = open(self.path, "xb")  # noqa: SIM115 - kept open for the whole session
        # warcio serialises each record into a buffer; we gzip it as its own member: warcio's
        # own gzip wrapper builds a level-9 compressor per record, most of a page's CPU.
        self._buffer = BytesIO()
        self._writer = WARCWriter(self._buffer, gzip=False)
        self._index: list[str] = []
        self._guard(self._write_warcinfo, collection)

    @property
    def size(self) -> int:
        return self._fh.tell()

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
            self._fh.flush()
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise OutOfSpace(f"no space left writing {self.path}") from exc
            raise

    def _write_warcinfo(self, collection: str) -> None:
        info = {"software": f"archiver-crawler {__version__}", "format": "WARC File Format 1.1",
                "isPartOf": collection}
        self._emit(self._writer.create_warcinfo_record(self.name, info))

    def write(self, ex: Exchange) -> None:
        self._guard(self._write_exchange, ex)

    def _write_exchange(self, ex: Exchange) -> None:
        date = warc_date(ex.date)
        headers = [(f"X-Archive-Orig-{k}" if k.lower() in _RENAMED else k, v)
                   for k, v in ex.response_headers]
        status_line = f"{ex.status} {ex.reason}".strip()
        response = self._writer.create_warc_record(
            ex.url, "response", payload=BytesIO(ex.body), length=len(ex.body),
            http_headers=StatusAndHeaders(status_line, headers, protocol=ex.http_version),
            warc_headers_dict=_warc_headers(date, ex.ip))
        request = self._writer.create_warc_record(
            ex.url, "request", payload=BytesIO(b""), length=0,
            http_headers=StatusAndHeaders(f"{ex.method} {ex.request_target} {ex.http_version}",
                                          ex.request_headers, is_http_request=True),
            warc_headers_dict=_warc_headers(date, ex.ip))
        request.rec_headers.add_header("WARC-Concurrent-To",
                                       response.rec_headers.get_header("WARC-Record-ID"))
        offset, length = self._emit(response)
        self._emit(request)
        self._index.append(self._cdxj_line(ex, response, offset, length))

    def _emit(self, record) -> tuple[int, int]:
        """Append one record as a gzip member; returns its offset and compressed length."""
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.write_record(record)
        member = zlib.compress(self._buffer.getbuffer(), GZIP_LEVEL, wbits=31)
        offset = self._fh.tell()
        self._fh.write(member)
        return offset, len(member)

    def _cdxj_line(self, ex: Exchange, response, offset: int, length: int) -> str:
        """The line cdxj-indexer would write for this response record."""
        fields = {"url": ex.url}
        mime = next((v for k, v in ex.response_headers if k.lower() == "content-type"), None)
        if mime:
            fields["mime"] = mime.split(";")[0].strip()
        fields.update({"status": str(ex.status),
                       "digest": response.rec_headers.get_header("WARC-Payload-Digest"),
                       "length": str(length), "offset": str(offset), "filename": self.name})
        stamp = ex.date.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        return f"{url_key(ex.url)} {stamp} {json.dumps(fields)}"

    def close(self) -> None:
        """Close the WARC and leave its index beside it (the WACZ then needs no re-read)."""
        if self._fh.closed:
            return
        self._fh.close()
        write_sidecar_index(self.path, self._index)


def sidecar_index_path(warc: Path) -> Path:
    return warc.parent.parent / "warc-cdxj" / (warc.name + ".cdxj")


def write_sidecar_index(warc: Path, lines: list[str]) -> None:
    path = sidecar_index_path(warc)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(partial, path)


def url_key(url: str) -> str:
    try:
        return surt.surt(url)
    except ValueError:
        return url


def _warc_headers(date: str, ip: str | None) -> dict[str, str]:
    headers = {"WARC-Date": date}
    if ip:
        headers["WARC-IP-Address"] = ip
    return headers

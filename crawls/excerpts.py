"""What a collection serves in place of an archive outside it (docs/security.md, "Collections").

A member deduplicated against a crawl outside the collection replays its unchanged pages from
that crawl's archive. Served whole, that archive gave away everything the other crawl kept (a
private crawl's pages, through a public link, to whoever got one of its images embedded in a
page the public crawl archived). A collection serves an excerpt instead: a WACZ holding only the
response records whose payload digests its members' revisit records name, named in the
collection's package as the members' `relation.requires` name the archive (ReplayWeb.page
looks a revisit's payload up in the WACZ of that name). Excerpts are written once, under
<data_dir>/excerpts/, named after the archive and the members they are cut for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from archiver import conf
from crawls import dedup
from crawls import excerpt_records as records
from crawls.downloads import file_name, package_name
from crawls.models import Collection, CrawlFile

FOLDER = "excerpts"
COPY_CHUNK = 1 << 20
PAGES_HEADER = b'{"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}\n'


@dataclass(frozen=True)
class Excerpt:
    """An excerpt of `source`, at `location` under the data dir. It answers to the names of
    its source (pk, crawl, path), which is how a collection's package and routes name it."""

    source: CrawlFile
    location: str
    size: int
    sha256: str
    crc32: int

    pk = property(lambda self: self.source.pk)
    crawl_id = property(lambda self: self.source.crawl_id)
    path = property(lambda self: self.source.path)
    created_at = property(lambda self: self.source.created_at)


def collection_archives(collection: Collection) -> list[CrawlFile | Excerpt]:
    """Its members' archives, then an excerpt of each archive outside it that they require
    (directly or not)."""
    members = list(collection.files())
    inside = {f.pk for f in members}
    outside = [f for f in dedup.with_required(members) if f.pk not in inside]
    if not outside:
        return members
    data_dir = conf.get().data_dir
    key = hashlib.sha256(" ".join(sorted(f.sha256 for f in members)).encode()).hexdigest()[:24]
    revisited: set[tuple[str, str]] | None = None  # read from the members only when needed
    found: list[CrawlFile | Excerpt] = []
    for source in outside:
        location = f"{FOLDER}/{source.pk}-{source.sha256[:16]}-{key}.wacz"
        described = data_dir / f"{location}.json"  # written last: the excerpt is complete
        if not described.exists():
            if revisited is None:
                revisited = revisits(members)
            cut(source, revisited, data_dir / location)
            describe(data_dir / location, described)
        found.append(Excerpt(source=source, location=location, **json.loads(described.read_text())))
    return members + found


def revisits(members: list[CrawlFile]) -> set[tuple[str, str]]:
    """(URL, payload digest) of every revisit record of the members: what ReplayWeb.page looks
    up, by that URL, in the archives they require."""
    found: set[tuple[str, str]] = set()
    for member in members:
        with dedup.open_kept(member, conf.get()) as fh, zipfile.ZipFile(fh) as zf:
            found.update((fields.get("url"), dedup.digest_of(fields)) for _, fields in index_fields(zf)
                         if fields.get("mime") == "warc/revisit")
    return found


def index_fields(zf: zipfile.ZipFile):
    """("<SURT> <timestamp>", fields) of each line of the WACZ's CDXJ index that names a
    record by its WARC, offset and length: the crawler's writing, checked before use."""
    name = next((n for n in dedup.INDEX_NAMES if n in zf.namelist()), None)
    if name is None:
        return
    with zf.open(name) as fh:
        for raw in fh:
            parts = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 2)
            try:
                fields = json.loads(parts[2])
                if int(fields["offset"]) >= 0 and int(fields["length"]) > 0 and isinstance(fields["filename"], str):
                    yield f"{parts[0]} {parts[1]}", fields
            except (ValueError, KeyError, TypeError, IndexError):
                continue


def describe(excerpt: Path, description: Path) -> None:
    """Its size, SHA-256 and CRC-32 beside it, read once (a package and replay.json name them)."""
    digest, crc, size = hashlib.sha256(), 0, 0
    with open(excerpt, "rb") as fh:
        while chunk := fh.read(COPY_CHUNK):
            digest.update(chunk)
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    write_private(description, json.dumps({"size": size, "sha256": digest.hexdigest(), "crc32": crc}).encode())


def cut(source: CrawlFile, wanted: set[tuple[str, str]], target: Path) -> None:
    """Write the excerpt of `source` holding its responses of those (URL, digest) (an empty
    excerpt when it holds none: the name must still answer)."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = source.created_at.timetuple()[:6]  # the same records give the same bytes
    warc_name = f"{Path(file_name(source)).stem}-excerpt.warc.gz"
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".part", delete=False) as out:
        try:
            with dedup.open_kept(source, conf.get()) as fh, zipfile.ZipFile(fh) as zf, \
                    zipfile.ZipFile(out, "w") as excerpt:
                index, entry = write_records(fh, zf, wanted, excerpt, f"archive/{warc_name}", warc_name, stamp)
                resources = [entry]
                for name, data in (("indexes/index.cdxj", index), ("pages/pages.jsonl", PAGES_HEADER)):
                    resources.append(stored(excerpt, name, data, stamp))
                package = json.dumps({
                    "profile": "data-package", "resources": resources, "wacz_version": "1.1.1",
                    "title": f"excerpt of {package_name(source.crawl_id, file_name(source))}",
                    "software": "archiver"}, indent=2).encode()
                stored(excerpt, "datapackage.json", package, stamp)
            os.replace(out.name, target)  # mkstemp made it 0600
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(out.name)
            raise


def write_records(raw, zf: zipfile.ZipFile, wanted: set[tuple[str, str]], excerpt: zipfile.ZipFile, arcname: str,
                  warc_name: str, stamp) -> tuple[bytes, dict]:
    """Copy the source's whole 200 responses of `wanted` (each a gzip member of its WARC),
    with only the headers a replay needs (crawls/excerpt_records.py), into one stored WARC of
    the excerpt: its CDXJ index, as bytes, and its datapackage entry."""
    found = list(payload_lines(zf, wanted))
    total = sum(int(fields["length"]) for _, fields in found)
    lines, offset, digest = [], 0, hashlib.sha256()
    # A ZIP64 field only when the central directory gets one too: ReplayWeb.page reads an
    # entry with a local-only one 20 bytes early (archiver_crawler/wacz.py). Each record is
    # compressed again: the margin covers one that comes out longer.
    with excerpt.open(zipfile.ZipInfo(arcname, date_time=stamp), "w",
                      force_zip64=2 * total > zipfile.ZIP64_LIMIT) as warc:
        for prefix, fields in found:
            length = 0
            source = record_bytes(raw, zf, f"archive/{fields['filename']}", int(fields["offset"]),
                                  int(fields["length"]))
            try:
                for chunk in records.cleaned(source):
                    warc.write(chunk)
                    digest.update(chunk)
                    length += len(chunk)
            except records.Unreadable:
                offset += length  # not indexed: no replay reads it
                continue
            moved = {**records.index_fields(fields), "filename": warc_name, "offset": offset, "length": length}
            lines.append(f"{prefix} {json.dumps(moved)}\n")
            offset += length
    entry = {"name": warc_name, "path": arcname, "hash": f"sha256:{digest.hexdigest()}", "bytes": offset}
    return "".join(lines).encode(), entry


def record_bytes(raw, zf: zipfile.ZipFile, name: str, offset: int, length: int):
    """`length` bytes at `offset` of member `name` of `zf` (open on `raw`), read where they
    are in the WACZ when the member is stored (as WACZs store their WARCs): seeking in a zip
    member reads it from the start, and a WARC may be gigabytes long."""
    info = zf.getinfo(name)
    end = min(offset + length, info.file_size)
    if info.compress_type != zipfile.ZIP_STORED:
        with zf.open(info) as member:
            member.seek(offset)
            yield member.read(max(end - offset, 0))
        return
    raw.seek(info.header_offset + 26)
    name_length, extra_length = struct.unpack("<HH", raw.read(4))
    start = info.header_offset + 30 + name_length + extra_length
    while offset < end:
        raw.seek(start + offset)
        chunk = raw.read(min(COPY_CHUNK, end - offset))
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


def payload_lines(zf: zipfile.ZipFile, wanted: set[tuple[str, str]]):
    """The index lines of the whole 200 responses of those (URL, digest) whose WARC the WACZ holds."""
    held = set(zf.namelist())
    for prefix, fields in index_fields(zf):
        if ((fields.get("url"), dedup.digest_of(fields)) in wanted and fields.get("mime") != "warc/revisit"
                and str(fields.get("status")) == "200" and f"archive/{fields['filename']}" in held):
            yield prefix, fields


def stored(excerpt: zipfile.ZipFile, name: str, data: bytes, stamp) -> dict:
    # Stored, not deflated: ReplayWeb.page reads a WACZ's members by byte range.
    excerpt.writestr(zipfile.ZipInfo(name, date_time=stamp), data, compress_type=zipfile.ZIP_STORED)
    return {"name": Path(name).name, "path": name, "hash": f"sha256:{hashlib.sha256(data).hexdigest()}",
            "bytes": len(data)}


def write_private(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".part", delete=False) as out:
        out.write(data)
    os.replace(out.name, path)

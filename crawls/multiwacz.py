"""A collection's download: one zip of its WACZs and a `datapackage.json` (profile
"multi-wacz-package"), streamed and by Range, never built in memory nor in a temp file.

The zip's entries are stored (not deflated: a WACZ is a zip already) and their CRC-32s are
known before the first byte (CrawlFile.crc32, read once per file and kept), so the whole
layout — every header, every offset, the central directory — follows from the members'
sizes: Content-Length is known, and the same byte of the same collection is always at the
same offset, which is what Range needs. ZIP64 records are written only where a size or an
offset does not fit in 32 bits (APPNOTE 4.5.3).
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

CHUNK = 256 * 1024
BIG = 0xFFFFFFFF
UTF8_NAMES = 0x0800


@dataclass(frozen=True)
class Member:
    """One stored entry: its name in the zip, its bytes' size and CRC-32, and how to read a
    span of them (first and last byte, inclusive)."""

    name: str
    size: int
    crc32: int
    modified: dt.datetime
    read: Callable[[int, int], Iterator[bytes]]


def in_memory(name: str, data: bytes, modified: dt.datetime) -> Member:
    return Member(name, len(data), zlib.crc32(data), modified, lambda first, last: iter([data[first:last + 1]]))


def datapackage(resources: list[dict], title: str, created: dt.datetime) -> bytes:
    """Stable bytes for the same resources: a download's layout must not change between requests."""
    body = {"profile": "multi-wacz-package", "title": title, "created": created.isoformat(),
            "resources": resources}
    return json.dumps(body, indent=2, sort_keys=True).encode()


def dos_time(when: dt.datetime) -> tuple[int, int]:
    when = max(when, dt.datetime(1980, 1, 1, tzinfo=when.tzinfo))
    return ((when.hour << 11) | (when.minute << 5) | (when.second // 2),
            ((when.year - 1980) << 9) | (when.month << 5) | when.day)


def local_header(member: Member) -> bytes:
    name = member.name.encode()
    big = member.size >= BIG
    extra = struct.pack("<HHQQ", 1, 16, member.size, member.size) if big else b""
    shown = BIG if big else member.size
    clock, day = dos_time(member.modified)
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if big else 20, UTF8_NAMES, 0, clock, day,
                       member.crc32, shown, shown, len(name), len(extra)) + name + extra


def central_entry(member: Member, offset: int) -> bytes:
    name = member.name.encode()
    wide = [member.size, member.size] if member.size >= BIG else []
    if offset >= BIG:
        wide.append(offset)
    extra = struct.pack(f"<HH{len(wide)}Q", 1, 8 * len(wide), *wide) if wide else b""
    shown = BIG if member.size >= BIG else member.size
    clock, day = dos_time(member.modified)
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45 if extra else 20, UTF8_NAMES, 0,
                       clock, day, member.crc32, shown, shown, len(name), len(extra), 0, 0, 0, 0,
                       min(offset, BIG)) + name + extra


def directory_end(count: int, start: int, size: int) -> bytes:
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                      min(size, BIG), min(start, BIG), 0)
    if count < 0xFFFF and start < BIG and size < BIG:
        return end
    record = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, start)
    locator = struct.pack("<IIQI", 0x07064B50, 0, start + size, 1)
    return record + locator + end


class Package:
    """The zip's layout as spans: bytes of headers, and the members' own bytes between them."""

    def __init__(self, members: list[Member]):
        self.spans: list[tuple[int, int, Callable[[int, int], Iterator[bytes]]]] = []
        self.size = 0
        directory = b""
        for member in members:
            offset = self.size
            self.add_bytes(local_header(member))
            self.add(member.size, member.read)
            directory += central_entry(member, offset)
        start = self.size
        self.add_bytes(directory + directory_end(len(members), start, len(directory)))

    def add_bytes(self, data: bytes) -> None:
        self.add(len(data), lambda first, last: iter([data[first:last + 1]]))

    def add(self, length: int, read) -> None:
        if length:
            self.spans.append((self.size, length, read))
            self.size += length

    def read(self, first: int, last: int) -> Iterator[bytes]:
        """Bytes `first` to `last` (inclusive) of the zip, each member opened only if needed."""
        for start, length, read in self.spans:
            end = start + length - 1
            if end < first or start > last:
                continue
            yield from read(max(first, start) - start, min(last, end) - start)

"""A WACZ's members and page lists, read from a hostile zip: its central directory measured
before it is parsed, member names taken as hostile, page lists decompressed a chunk at a
time within bounds (Limits). Used for what the runner keeps (runner/archive.py) and what it
takes in (runner/intake_wacz.py)."""

from __future__ import annotations

import contextlib
import io
import json
import struct
import time
import zipfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from runner.file_guard import CHUNK, Limits, Refused, read_at

KEPT_FOLDERS = ("archive", "pages", "logs")  # what a WACZ holds that a session wrote
PAGE_LISTS = ("pages/pages.jsonl", "pages/extraPages.jsonl")

# A zip is read from an open descriptor of ours (a file in the data dir, checked by
# regular_file) or from a seekable binary file (an object in the bucket, read by range).
ZipSource = int | BinaryIO


@contextlib.contextmanager
def zip_file(source: ZipSource) -> Iterator[BinaryIO]:
    if isinstance(source, int):
        with io.BufferedReader(io.FileIO(source, closefd=False)) as raw:
            yield raw
    else:
        source.seek(0)
        yield source


def read_exact(source: ZipSource, size: int, offset: int) -> bytes:
    if isinstance(source, int):
        return read_at(source, size, offset)
    source.seek(offset)
    data = source.read(size)
    if len(data) < size:
        raise Refused("a file shrank while it was read; left alone")
    return data


def zip_directory(fd: ZipSource, size: int) -> tuple[int, int]:
    """(entries, bytes) of a zip's central directory, as its end record says (zip64 too)."""
    tail_start = max(size - (22 + 0xFFFF), 0)
    tail = read_exact(fd, size - tail_start, tail_start)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise Refused("not a zip file (no end record)")
    count, directory = struct.unpack_from("<xxxxxxxxxxHI", tail, at)
    if count != 0xFFFF and directory != 0xFFFFFFFF:
        return count, directory
    end = tail_start + at
    locator = read_exact(fd, 20, end - 20) if end >= 20 else b""
    if locator[:4] != b"PK\x06\x07":
        raise Refused("a zip64 file without its locator")
    (record_at,) = struct.unpack_from("<Q", locator, 8)
    if record_at + 56 > size:
        raise Refused("a zip64 end record outside the file")
    record = read_exact(fd, 56, record_at)
    if record[:4] != b"PK\x06\x06":
        raise Refused("a zip64 file without its end record")
    return struct.unpack_from("<QQ", record, 32)


def zip_members(fd: ZipSource, size: int, limits: Limits) -> list[tuple[str, int]]:
    """(name, size) of every member, after checking the directory is of a sane size."""
    count, directory = zip_directory(fd, size)
    if count > limits.zip_entries or directory > limits.zip_directory_bytes:
        raise Refused(f"a zip claiming {count} entries in {directory} bytes of directory")
    try:
        with zip_file(fd) as raw, zipfile.ZipFile(raw) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError,
            struct.error, NotImplementedError) as exc:
        raise Refused(f"not a readable zip ({exc})") from exc
    if len(infos) > limits.zip_entries:
        raise Refused(f"a zip with {len(infos)} entries")
    return [(info.filename, info.file_size) for info in infos]


def session_files(members: list[tuple[str, int]]) -> tuple[dict[tuple[str, str], int], list[str]]:
    """{(folder, name): size} a session wrote, from hostile member names; and the refused names.

    Only `archive/`, `pages/` and `logs/` followed by one plain name; a name given twice with
    different sizes is ambiguous and left out.
    """
    wanted: dict[tuple[str, str], int] = {}
    refused, twice = [], set()
    for member, size in members:
        top, _, base = member.partition("/")
        if top not in KEPT_FOLDERS:
            if ".." in member.split("/") or member.startswith("/") or "\\" in member:
                refused.append(member)
            continue
        if not base:
            continue  # the folder's own entry, which some zip tools write
        if "/" in base or "\\" in base or "\0" in base or base.startswith("."):
            refused.append(member)
        elif wanted.setdefault((top, base), size) != size:
            twice.add((top, base))
    for key in twice:
        del wanted[key]
    return wanted, refused


def page_entries(fd: ZipSource, size: int, limits: Limits) -> Iterator[dict]:
    """The entries of the page lists of the WACZ open at `fd` (of `size` bytes; a descriptor
    or an object in the bucket, see zip_file).

    The WACZ is ours, its content the crawler's, and a few MB of zip can hold GBs of page
    list: the zip directory is measured before it is parsed, the lists are decompressed a
    chunk at a time, and reading them ends with Refused as soon as it passes any of the
    `pages_*` limits (bytes, lines counted empty ones too, entries, wall time) or a line is
    longer than `limits.page_line_bytes`, or `limits.stop` is set (the runner shuts down).
    Lines that are not JSON objects are skipped. The file's offset moves: callers read it by
    offset or not at all afterwards.
    """
    cost = PagesCost(limits)
    names = {name for name, _size in zip_members(fd, size, limits)}
    try:
        with zip_file(fd) as raw, zipfile.ZipFile(raw) as wacz:
            for member in (name for name in PAGE_LISTS if name in names):
                with wacz.open(member) as stream:
                    yield from member_entries(member, stream, cost)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, zlib.error,
            struct.error, NotImplementedError) as exc:
        raise Refused(f"not a readable zip ({exc})") from exc


class PagesCost:
    """What reading page lists has cost so far; Refused once it is over one of the limits."""

    def __init__(self, limits: Limits):
        self.limits, self.stop = limits, limits.stop
        self.deadline = time.monotonic() + limits.pages_seconds
        self.bytes = self.lines = self.entries = 0

    def read(self, data: bytes, lines: int) -> None:
        self.bytes += len(data)
        self.lines += lines
        if self.bytes > self.limits.pages_bytes:
            raise Refused(f"its page lists are over {self.limits.pages_bytes} bytes")
        if self.lines > self.limits.pages_lines:
            raise Refused(f"its page lists have over {self.limits.pages_lines} lines")
        self.check_time()

    def entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.pages_entries:
            raise Refused(f"its page lists have over {self.limits.pages_entries} entries")
        self.check_time()

    def check_time(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Refused("the runner is stopping")
        if time.monotonic() > self.deadline:
            raise Refused(f"its page lists took over {self.limits.pages_seconds:g}s to read")


def member_entries(member: str, stream: BinaryIO, cost: PagesCost) -> Iterator[dict]:
    """The JSON objects of one page list, read CHUNK decompressed bytes at a time."""
    rest = b""
    while chunk := stream.read(CHUNK):
        cost.read(chunk, chunk.count(b"\n"))
        *lines, rest = (rest + chunk).split(b"\n")
        if len(rest) > cost.limits.page_line_bytes:
            raise Refused(f"{member} has a line over {cost.limits.page_line_bytes} bytes")
        for line in lines:
            if len(line) > cost.limits.page_line_bytes:
                raise Refused(f"{member} has a line over {cost.limits.page_line_bytes} bytes")
            if (entry := json_object(line)) is not None:
                cost.entry()
                yield entry
    if (entry := json_object(rest)) is not None:
        cost.entry()
        yield entry


def json_object(line: bytes) -> dict | None:
    """The JSON object on `line`, or None (an empty line or anything else costs no parse)."""
    if not line.lstrip().startswith(b"{"):
        return None
    with contextlib.suppress(ValueError, RecursionError):
        value = json.loads(line)
        return value if isinstance(value, dict) else None
    return None

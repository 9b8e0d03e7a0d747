"""Keeping a crawl's archives: the one file boundary between the runner and its crawlers.

    kept = collect_wacz(data_dir, crawl, process, now)      # the session's WACZ, moved and recorded
    gone = forget_archived(data_dir, crawl.pk, process.instance, kept.files[0])
    kept, gone = collect_session(data_dir, crawl, process, now)  # both, for an exited instance
    kept = move_leftovers(data_dir, crawl, process, now)    # WARCs no WACZ holds (a crawler that died)
    kept = adopt_unrecorded(data_dir, crawl, now)           # files in archives/ that no row records
    done = delete_files(data_dir, crawl)                    # cancel and retention only
    write_config(data_dir, crawl.pk, instance, "crawler.json", data)  # never through a link

Every result carries `warnings`: readable sentences for the crawl's log (they are logged here
too); `Refused` is raised only by write_config. OSError means the disk itself failed (full,
read-only): nothing was lost and the next call retries. Limits.of(settings) gives the bounds
(ARCHIVER_ARCHIVE_MAX_BYTES is the size cap).

What the boundary guarantees, and why. A crawler runs whatever the web sends it, so we assume
it is compromised and that anything in its instance folder (`crawls/<crawl>/<instance>/`,
mounted into its container) may be a trap: a symbolic link to a host file or folder, a device
such as /dev/zero, a FIFO that blocks whoever opens it, a 100 GB sparse file, a hard link, or a
zip whose member names say `../../etc/passwd`. The runner usually runs as root. So:

- Every folder is opened relative to a descriptor of its parent, one component at a time, with
  O_NOFOLLOW|O_DIRECTORY; a path is never resolved as a whole, so nothing outside the instance
  folder is ever reached through it. Only data_dir/crawls and data_dir/archives themselves,
  which no crawler can reach, may be links or mounts (an operator's other disk; files then
  cross by copying exactly the measured bytes).
- A file is looked at (lstat) before it is opened, and opened only if it is a regular file with
  one link and no larger than `Limits.file_bytes`; it is opened O_NOFOLLOW|O_NONBLOCK and the
  descriptor's fstat must be the same file. Devices and FIFOs are therefore never read (and
  even a swapped-in FIFO cannot block the open). Sizes come from the descriptor, and every read
  stops at that size.
- A zip's central directory is measured from its end record before it is parsed, so a WACZ
  claiming millions of entries is refused instead of filling memory. Member names are hostile:
  only `archive/<name>`, `pages/<name>` and `logs/<name>` are considered, one plain component.
- A file is deleted with unlinkat() in the folder descriptor we opened, after checking that
  the entry is still the regular file we measured; a crawler's file never decides what is
  deleted outside its own folder (only `delete_files`, for cancel and retention, deletes kept
  archives, and it takes its paths from our own rows, checked to stay in `archives/<crawl>/`).
- A kept file is made the runner's (its uid, and its gid or the setgid folder's) and 0600
  on the descriptor the guard opened, whichever user wrote it (a container's uid 1000).
- Files we write into a crawler's folder are new files (O_CREAT|O_EXCL|O_NOFOLLOW) renamed
  into place, so a planted `crawler.json` link is replaced, never followed.
- Nothing is deleted because something went wrong: a WACZ that cannot be read stays, the WARCs
  of a crawler that died before packaging are kept (`move_leftovers`), and a file in
  `archives/` that no row records is recorded (`adopt_unrecorded`), never removed.

What it cannot stop: a crawler that still runs can change its files between two of our
system calls; each check is repeated on the descriptor, and a swapped entry is refused or
moved back, but a device node the crawler creates (Docker grants CAP_MKNOD) could be opened in
that window — mount crawl folders `nodev` where that matters. The runner calls these functions
only after an instance exited.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import io
import json
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from django.db import transaction

from archiver.conf import Settings
from archiver.errors import ArchiverError
from crawls import storage
from crawls.models import Crawl, CrawlFile, Process

log = logging.getLogger(__name__)

ARCHIVES = "archives"  # data_dir/archives/<crawl>/: the runner's own folder of kept files
CRAWLS = "crawls"  # data_dir/crawls/<crawl>/<instance>/: a crawler's folder (hostile)
CHUNK = 1 << 20
KEPT_FOLDERS = ("archive", "pages", "logs")  # what a WACZ holds that a session wrote
INDEX_FOLDERS = (("warc-cdx", ".cdx"), ("warc-cdxj", ".cdxj"))  # per-WARC indexes go with it
WARC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}\.warc(\.gz)?")  # kept as it is
KEPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,240}\.(wacz|warc|warc\.gz)")  # < NAME_MAX
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(ArchiverError):
    """A path the file guard will not touch; the message is the readable warning."""


@dataclass(frozen=True)
class Limits:
    """Bounds on what the runner reads from a crawler (ARCHIVER_ARCHIVE_MAX_BYTES sets the first)."""

    file_bytes: int = 64 << 30  # the largest WACZ or WARC kept or hashed
    zip_entries: int = 10_000  # a WACZ's members (a session's WACZ has a few per WARC)
    zip_directory_bytes: int = 4 << 20  # a WACZ's central directory, parsed in memory
    folder_entries: int = 100_000  # entries of one folder looked at
    # Reading a WACZ's page lists (to name its pages) costs at most these, all lists together:
    pages_bytes: int = 256 << 20  # decompressed bytes
    pages_lines: int = 2_000_000  # lines, empty ones too
    pages_entries: int = 1_000_000  # JSON objects yielded
    pages_seconds: float = 20.0  # wall time from the first read, the caller's work included
    page_line_bytes: int = 1 << 20  # one line of a page list (a page's extracted text can be long)
    stop: threading.Event | None = field(default=None, compare=False)  # set: reading ends now

    @classmethod
    def of(cls, settings: Settings, stop: threading.Event | None = None) -> Limits:
        """The limits the settings give; `stop` is the runner's stop event (shutdown ends a read)."""
        return cls(file_bytes=settings.archive_max_bytes, stop=stop)


@dataclass
class Kept:
    """Files recorded for a crawl by one call (`files`: now or by an earlier look)."""

    files: list[CrawlFile] = field(default_factory=list)
    added_bytes: int = 0  # bytes recorded by this call, already added to the org
    left_behind: int = 0  # WARCs refused or not movable: still in the crawler's folder
    warnings: list[str] = field(default_factory=list)


@dataclass
class Removed:
    """What a clean-up deleted, and what it left in the instance's archive/ folder."""

    deleted: int = 0
    deleted_bytes: int = 0
    left_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


# --- the guard: folders and files opened relative to a descriptor -----------------------------


def plain_name(name: str) -> str:
    """`name` if it is one path component the runner may open; else Refused."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or len(os.fsencode(name)) > 255:
        raise Refused(f"{name[:80]!r} is not a plain file name")
    return name


def kind_of(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_dir(parent: int, name: str, create: bool = False) -> int:
    """A descriptor of the folder `name` in `parent`, never through a link."""
    plain_name(name)
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        raise Refused(f"{name} is {kind_of(mode)}, not a folder; left alone") from exc


@contextlib.contextmanager
def folder(data_dir: Path, top: str, *parts: str, create: bool = False) -> Iterator[int]:
    """A descriptor of data_dir/top/parts, each of `parts` opened without following links.

    `top` (crawls/ or archives/) is the runner's own and no crawler can replace it, so it
    may be a link or a mount the operator placed on another disk.
    """
    root = data_dir / top
    if create:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack.callback(os.close, fd)
        for part in parts:
            fd = open_dir(fd, part, create)
            stack.callback(os.close, fd)
        yield fd


def check_regular(name: str, st: os.stat_result, max_bytes: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{name} is {kind_of(st.st_mode)}, not a regular file; left alone")
    if st.st_nlink != 1:
        raise Refused(f"{name} has {st.st_nlink} hard links; left alone")
    if st.st_size > max_bytes:
        raise Refused(f"{name} is {st.st_size} bytes, over the limit of {max_bytes}; left alone")


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def regular_file(dir_fd: int, name: str, max_bytes: int) -> Iterator[tuple[int, os.stat_result]]:
    """(descriptor, its stat) of a regular file of at most `max_bytes`, or Refused.

    Looked at before it is opened, so a device or FIFO is never opened at all; opened without
    following links and without blocking, then checked again on the descriptor.
    """
    plain_name(name)
    before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    check_regular(name, before, max_bytes)
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise Refused(f"{name} became a symbolic link; left alone") from exc
    try:
        st = os.fstat(fd)
        if not same_file(st, before):
            raise Refused(f"{name} changed while it was opened; left alone")
        check_regular(name, st, max_bytes)
        yield fd, st
    finally:
        os.close(fd)


def read_at(fd: int, size: int, offset: int) -> bytes:
    """Exactly `size` bytes at `offset`, or Refused (the file shrank under us)."""
    data = os.pread(fd, size, offset)
    while len(data) < size:
        more = os.pread(fd, size - len(data), offset + len(data))
        if not more:
            raise Refused("a file shrank while it was read; left alone")
        data += more
    return data


def sha256_fd(fd: int, size: int) -> str:
    """The sha256 of the first `size` bytes (the size fstat gave: never more)."""
    digest = hashlib.sha256()
    for offset in range(0, size, CHUNK):
        digest.update(read_at(fd, min(CHUNK, size - offset), offset))
    return digest.hexdigest()


def remove_checked(dir_fd: int, name: str, measured: os.stat_result) -> None:
    """unlinkat() `name` only while it is still the regular file we measured."""
    now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(now.st_mode) or not same_file(now, measured):
        raise Refused(f"{name} changed before it was deleted; left alone")
    os.unlink(name, dir_fd=dir_fd)


def write_private(dir_fd: int, name: str, data: bytes, mode: int = 0o600,
                  owner: tuple[int, int] | None = None) -> None:
    """Write `name` in `dir_fd` as a new file renamed into place (a planted link is replaced,
    never followed; readers never see half a file), owned by `owner` if given. The one
    writer of files in a crawler's folder (the launchers use it too)."""
    plain_name(name)
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, NEW_FILE_FLAGS, mode, dir_fd=dir_fd)
    try:
        with open(fd, "wb", closefd=False) as handle:
            handle.write(data)
        os.fchmod(fd, mode)  # whatever the umask
        if owner is not None:
            os.fchown(fd, *owner)
        os.fsync(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        if isinstance(exc, IsADirectoryError):
            raise Refused(f"{name} is a folder; not replaced") from exc
        raise
    finally:
        os.close(fd)


def write_config(data_dir: Path, crawl_id: str, instance: int, name: str, data: bytes,
                 mode: int = 0o644) -> None:
    """Write a file (crawler.json) into an instance's folder, creating the folder; Refused when
    a crawler replaced its folder by something else. 0644: the crawler's user must read it."""
    with folder(data_dir, CRAWLS, crawl_id, str(instance), create=True) as fd:
        write_private(fd, name, data, mode)


def read_tail(data_dir: Path, crawl_id: str, instance: int, name: str, max_bytes: int = 16384) -> bytes:
    """The last `max_bytes` of a file in an instance's folder (a log, an exit code), b"" if
    there is none, Refused if it is not a regular file: a FIFO or /dev/zero planted as the log
    cannot block or flood the runner. For LocalLauncher's process-<pk>.log and .exit."""
    try:
        with folder(data_dir, CRAWLS, crawl_id, str(instance)) as parent, \
                regular_file(parent, name, 1 << 62) as (fd, st):
            start = max(st.st_size - max_bytes, 0)
            return read_at(fd, st.st_size - start, start)
    except FileNotFoundError:
        return b""


def entries(dir_fd: int, limits: Limits) -> Iterator[os.DirEntry]:
    """A folder's entries, at most `limits.folder_entries` of them."""
    with os.scandir(dir_fd) as listing:
        for count, entry in enumerate(listing):
            if count >= limits.folder_entries:
                raise Refused(f"a folder has over {limits.folder_entries} entries; the rest left alone")
            yield entry


# --- zip members ------------------------------------------------------------------------------


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


# --- recording --------------------------------------------------------------------------------


def record(crawl: Crawl, path: str, size: int, digest: str, now: dt.datetime,
           root: str = "") -> tuple[CrawlFile, bool]:
    """The CrawlFile of `path`, created once with the org's bytes added in the same transaction
    (`root`: s3://<bucket> for an object, whose `path` is then its key)."""
    with transaction.atomic():
        row, created = CrawlFile.objects.get_or_create(
            path=path, defaults={"crawl": crawl, "size": size, "sha256": digest, "created_at": now,
                                 "root": root})
        if created:
            crawl.org.add_bytes(size)
    return row, created


def keep(crawl: Crawl, archives_fd: int, name: str, now: dt.datetime, limits: Limits,
         kept: Kept) -> None:
    """Record archives/<crawl>/<name> (hashed through the guard) unless a row already does."""
    path = f"{ARCHIVES}/{crawl.pk}/{name}"
    row = CrawlFile.objects.filter(path=path).first()
    if row is None:
        with regular_file(archives_fd, name, limits.file_bytes) as (fd, st):
            if problem := make_private(fd, st, archives_fd):
                warn(crawl.pk, kept.warnings, f"{name}: {problem}")
            row, created = record(crawl, path, st.st_size, sha256_fd(fd, st.st_size), now)
        if created:
            kept.added_bytes += row.size
            log.info("crawl %s: kept %s (%d bytes)", crawl.short_id, path, row.size)
    kept.files.append(row)


def runners_owner(dir_fd: int) -> tuple[int, int]:
    """(uid, gid) a file the runner creates in `dir_fd` gets: its own user, and the folder's
    group when the folder is setgid (a shared data dir), else its own group."""
    folder_st = os.fstat(dir_fd)
    gid = folder_st.st_gid if folder_st.st_mode & stat.S_ISGID else os.getegid()
    return os.geteuid(), gid


def make_private(fd: int, st: os.stat_result, dir_fd: int) -> str:
    """A kept file becomes the runner's, 0600, whoever wrote it (a container's uid 1000, a
    crawler's umask): changed on the descriptor the guard opened, never through a path. The
    reason when the runner may not (not root, another user's file): it is kept as it is."""
    owner = runners_owner(dir_fd)
    try:
        if (st.st_uid, st.st_gid) != owner:
            os.fchown(fd, *owner)
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except PermissionError as exc:
        return (f"kept as it is (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}), "
                f"not made the runner's: {exc.strerror}")
    return ""


def move_in(src_fd: int, name: str, dst_fd: int, target: str, limits: Limits) -> None:
    """Move a crawler's regular file into our archives folder under `target` (never replacing)."""
    with regular_file(src_fd, name, limits.file_bytes) as (fd, st):
        with contextlib.suppress(FileNotFoundError):
            os.stat(target, dir_fd=dst_fd, follow_symlinks=False)
            raise Refused(f"{target} is already kept; {name} left alone")
        try:
            os.rename(name, target, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            copy_in(fd, st, dst_fd, target)
            remove_checked(src_fd, name, st)
            return
        moved = os.stat(target, dir_fd=dst_fd, follow_symlinks=False)
        if not same_file(moved, st):  # swapped between our check and the rename: give it back
            os.rename(target, name, src_dir_fd=dst_fd, dst_dir_fd=src_fd)
            raise Refused(f"{name} changed while it was moved; left alone")
        os.fsync(dst_fd)


def copy_in(fd: int, st: os.stat_result, dst_fd: int, target: str) -> None:
    """The crawler's folder is on another file system: copy exactly the measured bytes."""
    temp = f".{target}.{secrets.token_hex(6)}.tmp"
    out = os.open(temp, NEW_FILE_FLAGS, 0o600, dir_fd=dst_fd)
    try:
        for offset in range(0, st.st_size, CHUNK):
            chunk = memoryview(read_at(fd, min(CHUNK, st.st_size - offset), offset))
            while chunk:
                chunk = chunk[os.write(out, chunk):]
        os.fsync(out)
        os.rename(temp, target, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dst_fd)
        raise
    finally:
        os.close(out)


def warn(crawl_id: str, warnings: list[str], message: str) -> None:
    log.warning("crawl %s: %s", crawl_id[:8], message)
    warnings.append(message)


# --- the steps --------------------------------------------------------------------------------


def collection_parts(crawl_id: str, instance: int) -> tuple[str, ...]:
    """Where instance `instance` writes its collection (its folder is mounted on /crawls)."""
    return (CRAWLS, crawl_id, str(instance), "collections", crawl_id)


def wacz_name(crawl_id: str, process: Process) -> str:
    return f"{crawl_id}-{process.instance}-{process.pk}.wacz"


def collect_wacz(data_dir: Path, crawl: Crawl, process: Process, now: dt.datetime,
                 limits: Limits = Limits()) -> Kept:
    """Move an instance's session WACZ into archives/<crawl>/ and record it exactly once.

    Called after the instance exited, before a relaunch could overwrite it. A crash between
    the move and the record is repaired by the next call (the moved file is recorded then).
    `kept.files` is empty when there was nothing to keep, with warnings if something was refused.
    """
    kept, target = Kept(), wacz_name(crawl.pk, process)
    try:
        with folder(data_dir, ARCHIVES, crawl.pk, create=True) as archives:
            try:
                with folder(data_dir, *collection_parts(crawl.pk, process.instance)) as collection:
                    move_in(collection, f"{crawl.pk}.wacz", archives, target, limits)
            except FileNotFoundError:
                pass  # no WACZ (or no collection): nothing new, maybe an earlier move to record
            except Refused as exc:
                warn(crawl.pk, kept.warnings, f"instance {process.instance}'s WACZ: {exc}")
            with contextlib.suppress(FileNotFoundError):
                keep(crawl, archives, target, now, limits, kept)
    except Refused as exc:
        warn(crawl.pk, kept.warnings, f"keeping instance {process.instance}'s WACZ: {exc}")
    return kept


def collect_session(data_dir: Path, crawl: Crawl, process: Process, now: dt.datetime,
                    limits: Limits = Limits()) -> tuple[Kept, Removed | None]:
    """collect_wacz(), then forget_archived() what it kept: what an exited instance needs.
    The Removed is None when there was no WACZ (its `left_bytes` is then unknown)."""
    kept = collect_wacz(data_dir, crawl, process, now, limits)
    if not kept.files:
        return kept, None
    return kept, forget_archived(data_dir, crawl.pk, process.instance, kept.files[0], limits)


def forget_archived(data_dir: Path, crawl_id: str, instance: int, kept: CrawlFile,
                    limits: Limits = Limits()) -> Removed:
    """Delete from the instance's collection what the kept WACZ holds whole (same size).

    Every session's WACZ packs every WARC in archive/ (and the page lists and logs), so
    without this the next session's WACZ would repeat this one. The WACZ's member names are
    hostile: only one plain name under archive/, pages/ or logs/ is considered, looked up in
    that folder's descriptor. A WARC's per-file index goes with it. `left_bytes` is what stays
    in archive/ (the instance's `:size` from now on); a WACZ that cannot be read deletes nothing.
    """
    removed = Removed()
    try:
        wanted, refused = held_by(data_dir, kept, limits)
    except (Refused, FileNotFoundError) as exc:
        warn(crawl_id, removed.warnings, f"cannot read {kept.path} ({exc}); nothing deleted")
        wanted, refused = {}, []
    if refused:
        warn(crawl_id, removed.warnings, f"{kept.path} lists {len(refused)} entries outside its "
             f"folders (such as {refused[0][:100]!r}); ignored")
    try:
        with folder(data_dir, *collection_parts(crawl_id, instance)) as collection:
            forget_members(collection, wanted, removed, limits, crawl_id, instance)
    except FileNotFoundError:
        pass
    except Refused as exc:
        warn(crawl_id, removed.warnings, f"instance {instance}: {exc}")
    return removed


def forget_members(collection: int, wanted: dict, removed: Removed, limits: Limits,
                   crawl_id: str, instance: int) -> None:
    """Delete what `wanted` (session_files() of a kept WACZ) names in the collection; then
    measure what archive/ still holds."""
    for sub in KEPT_FOLDERS:
        names = {base: size for (top, base), size in wanted.items() if top == sub}
        try:
            forget_in(collection, sub, names, removed, limits)
        except Refused as exc:
            warn(crawl_id, removed.warnings, f"instance {instance}: {exc}")
    removed.left_bytes = archive_bytes(collection, limits)


# Given a WACZ's SHA-256 and the entries of its page lists; it must read them at once (the
# file is open only during the call) and handle Refused and OSError while reading them.
PagesSeen = Callable[[str, Iterator[dict]], None]


def forget_uploaded(data_dir: Path, crawl_id: str, instance: int, digests: set[str],
                    limits: Limits = Limits(), pages: PagesSeen | None = None) -> Removed | None:
    """With object storage: the session WACZ a crawler uploaded stays in its collection. When
    its SHA-256 is one of `digests` (the crawl's recorded files), `pages` is given that
    SHA-256 and the entries of its page lists (the only time they can be read: the bucket's
    copy is not read back), what it holds is deleted from the collection as
    forget_archived() does, and then the WACZ itself. None when there is no such WACZ, or it
    was not recorded (then nothing is deleted: its WARCs are packed again by the next
    session, or kept at the crawl's end)."""
    name = f"{crawl_id}.wacz"
    warnings: list[str] = []
    try:
        with folder(data_dir, *collection_parts(crawl_id, instance)) as collection:
            with regular_file(collection, name, limits.file_bytes) as (fd, st):
                if (digest := sha256_fd(fd, st.st_size)) not in digests:
                    return None
                if pages is not None:
                    pages(digest, page_entries(fd, st.st_size, limits))
                wanted, refused = session_files(zip_members(fd, st.st_size, limits))
            removed = Removed(warnings=warnings)
            if refused:
                warn(crawl_id, warnings, f"instance {instance}'s WACZ lists {len(refused)} "
                     f"entries outside its folders (such as {refused[0][:100]!r}); ignored")
            forget_members(collection, wanted, removed, limits, crawl_id, instance)
            remove_checked(collection, name, st)
            return removed
    except FileNotFoundError:
        return None
    except Refused as exc:
        warn(crawl_id, warnings, f"instance {instance}'s uploaded WACZ: {exc}; nothing deleted")
        return Removed(warnings=warnings) if warnings else None


def held_by(data_dir: Path, kept: CrawlFile, limits: Limits) -> tuple[dict, list[str]]:
    """What the kept WACZ (a row of ours, path checked) holds, by folder and name."""
    parts = kept_parts(kept)
    with folder(data_dir, *parts[:-1]) as archives, \
            regular_file(archives, parts[-1], limits.file_bytes) as (fd, st):
        return session_files(zip_members(fd, st.st_size, limits))


def forget_in(collection: int, sub: str, names: dict[str, int], removed: Removed,
              limits: Limits) -> None:
    """Delete the regular files of collection/<sub> whose name and size the WACZ holds."""
    if not names:
        return
    try:
        fd = open_dir(collection, sub)
    except FileNotFoundError:
        return
    try:
        for name, size in names.items():
            try:
                st = os.stat(plain_name(name), dir_fd=fd, follow_symlinks=False)
                check_regular(name, st, limits.file_bytes)
                if st.st_size != size:
                    continue  # grew after packaging: kept for the next session's WACZ
                remove_checked(fd, name, st)
            except FileNotFoundError:
                continue
            except Refused as exc:
                removed.warnings.append(f"{sub}/{exc}")
                continue
            removed.deleted += 1
            removed.deleted_bytes += size
            if sub == "archive":
                forget_indexes(collection, name)
    finally:
        os.close(fd)


def forget_indexes(collection: int, warc: str) -> None:
    """The per-WARC index files of a deleted WARC (packaging merges every index it finds)."""
    for sub, suffix in INDEX_FOLDERS:
        with contextlib.suppress(FileNotFoundError, Refused):
            fd = open_dir(collection, sub)
            try:
                name = plain_name(warc + suffix)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISREG(st.st_mode):
                    remove_checked(fd, name, st)
            finally:
                os.close(fd)


def archive_bytes(collection: int, limits: Limits) -> int:
    """Bytes of the regular WARC files left in collection/archive (links and others count 0)."""
    try:
        fd = open_dir(collection, "archive")
    except (FileNotFoundError, Refused):
        return 0  # no folder, or not one: no WARC bytes there
    try:
        return sum(entry.stat(follow_symlinks=False).st_size for entry in entries(fd, limits)
                   if warc_suffix(entry.name) and entry.is_file(follow_symlinks=False))
    finally:
        os.close(fd)


def move_leftovers(data_dir: Path, crawl: Crawl, process: Process, now: dt.datetime,
                   limits: Limits = Limits()) -> Kept:
    """Keep the WARCs an instance left in archive/ that no WACZ holds: moved and recorded as is.

    For a crawler that died before (or while) packaging, and for what forget_archived() left.
    Call it once the instance will not be launched again (the crawl ends), after collect_wacz()
    and forget_archived(), before the working folder is removed.

    Why move the WARCs rather than package them into a WACZ here: a rename needs no free space
    (the crawler often died *because* the disk filled while it packaged), takes no time in the
    runner's loop whatever the size, and does not make the runner parse hostile WARC content;
    a WARC is itself a standard archive every replay tool reads. The bytes are kept exactly as
    written: a last record cut short by a kill is unreadable past the cut, but the complete
    records before it replay, and nothing the crawler wrote is thrown away. Each file is
    recorded (size, sha256) like a WACZ, as archives/<crawl>/<crawl>-<instance>-<process>-<warc>.
    """
    kept, prefix = Kept(), f"{crawl.pk}-{process.instance}-{process.pk}-"
    try:
        with folder(data_dir, ARCHIVES, crawl.pk, create=True) as archives:
            try:
                with folder(data_dir, *collection_parts(crawl.pk, process.instance), "archive") as source:
                    names = sorted(e.name for e in entries(source, limits))
                    for name in filter(warc_suffix, names):
                        try:
                            move_in(source, name, archives, prefix + leftover_name(name), limits)
                        except (Refused, OSError) as exc:  # a full disk too: the next look retries
                            kept.left_behind += 1
                            warn(crawl.pk, kept.warnings, f"instance {process.instance}'s archive/"
                                 f"{exc if isinstance(exc, Refused) else f'{name} not moved: {exc}'}")
            except FileNotFoundError:
                pass
            adopt_in(crawl, archives, now, limits, kept, prefix)  # moved now, or before a crash
    except Refused as exc:
        warn(crawl.pk, kept.warnings, f"instance {process.instance}'s leftovers: {exc}")
    return kept


def leftover_name(name: str) -> str:
    """The WARC's own name, or one made from its hash when it is odd (the same on every look)."""
    if WARC_NAME.fullmatch(name):
        return name
    return hashlib.sha256(os.fsencode(name)).hexdigest()[:16] + warc_suffix(name)


def warc_suffix(name: str) -> str:
    """".warc.gz" or ".warc" if `name` is a WARC file's, else ""."""
    return next((suffix for suffix in (".warc.gz", ".warc") if name.endswith(suffix)), "")


def adopt_unrecorded(data_dir: Path, crawl: Crawl, now: dt.datetime,
                     limits: Limits = Limits()) -> Kept:
    """Record the files of archives/<crawl>/ that no CrawlFile records (never delete them).

    A runner that died between a move and its record, or one that comes back to a data dir it
    left, finds archives that are the crawl's data: they are measured and recorded, and the
    org's bytes follow. Temporary files (a leading dot) and odd names are left alone.
    """
    kept = Kept()
    try:
        with folder(data_dir, ARCHIVES, crawl.pk) as archives:
            adopt_in(crawl, archives, now, limits, kept)
    except FileNotFoundError:
        pass
    except Refused as exc:
        warn(crawl.pk, kept.warnings, f"archives: {exc}")
    return kept


def adopt_in(crawl: Crawl, archives: int, now: dt.datetime, limits: Limits, kept: Kept,
             prefix: str = "") -> None:
    """Record the files of archives/<crawl>/ starting with `prefix` that no row records yet."""
    recorded = set(crawl.files.values_list("path", flat=True))
    for name in sorted(e.name for e in entries(archives, limits)):
        if not name.startswith(prefix) or not KEPT_NAME.fullmatch(name):
            continue
        if f"{ARCHIVES}/{crawl.pk}/{name}" in recorded:
            continue
        try:
            keep(crawl, archives, name, now, limits, kept)
        except Refused as exc:
            warn(crawl.pk, kept.warnings, f"archives: {exc}")


def archived_crawl_ids(data_dir: Path, limits: Limits = Limits()) -> list[str]:
    """The crawl ids that have a folder in archives/ (for adopt_unrecorded at start-up)."""
    try:
        with folder(data_dir, ARCHIVES) as archives:
            return sorted(e.name for e in entries(archives, limits) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def kept_parts(row: CrawlFile) -> tuple[str, str, str]:
    """archives/<crawl>/<name> of a row, or Refused: a path of ours, never anything else."""
    parts = tuple(row.path.split("/"))
    if len(parts) != 3 or parts[0] != ARCHIVES or parts[1] != row.crawl_id \
            or not KEPT_NAME.fullmatch(parts[2]):
        raise Refused(f"{row.path[:200]!r} is not a file of archives/{row.crawl_id}/")
    return parts


PAGE_LISTS = ("pages/pages.jsonl", "pages/extraPages.jsonl")


def kept_pages(data_dir: Path, kept: CrawlFile, limits: Limits = Limits()) -> Iterator[dict]:
    """The entries (JSON objects) of a kept WACZ's page lists, read through the guard.
    Refused or OSError when the file cannot be read or costs too much (see page_entries)."""
    parts = kept_parts(kept)
    with folder(data_dir, *parts[:-1]) as archives, \
            regular_file(archives, parts[-1], limits.file_bytes) as (fd, st):
        yield from page_entries(fd, st.st_size, limits)


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


def delete_object(crawl: Crawl, row: CrawlFile, objects, removed: Removed) -> None:
    """An object in the bucket, then its row; the row stays when the store refuses (so a
    later delete or retention pass can try again)."""
    try:
        if objects is None or objects.target.root != row.root:
            raise storage.StorageError(f"{row.root}/{row.path} is in a bucket "
                                       "ARCHIVER_STORAGE_URL does not name")
        objects.delete(row.path)
    except storage.StorageError as exc:
        warn(crawl.pk, removed.warnings, f"deleting its files: {exc}; its record is kept")
        return
    removed.deleted += 1
    with transaction.atomic():
        if CrawlFile.objects.filter(pk=row.pk).delete()[0]:
            crawl.org.add_bytes(-row.size)
            removed.deleted_bytes += row.size


def delete_files(data_dir: Path, crawl: Crawl, objects=None) -> Removed:
    """Cancel and retention only: remove the crawl's recorded files and their org bytes
    (objects in the bucket through `objects`, a crawls.storage.ObjectStore).

    Paths come from our rows and must be archives/<crawl>/<name>; anything else is not
    touched on disk (its row still goes: the crawl keeps nothing). A file is removed before
    its row, so a crash in between leaves a row without a file, never a file without a row.
    The folder goes when it is empty.
    """
    removed = Removed()
    for row in crawl.files.all():
        if storage.is_object(row):
            delete_object(crawl, row, objects, removed)
            continue
        try:
            parts = kept_parts(row)
            with folder(data_dir, *parts[:-1]) as archives:
                st = os.stat(parts[-1], dir_fd=archives, follow_symlinks=False)
                check_regular(parts[-1], st, st.st_size)
                remove_checked(archives, parts[-1], st)
                removed.deleted += 1
        except FileNotFoundError:
            pass
        except Refused as exc:
            warn(crawl.pk, removed.warnings, f"deleting its files: {exc}")
        with transaction.atomic():
            if CrawlFile.objects.filter(pk=row.pk).delete()[0]:
                crawl.org.add_bytes(-row.size)
                removed.deleted_bytes += row.size
    with contextlib.suppress(OSError, Refused), folder(data_dir, ARCHIVES) as archives:
        os.rmdir(plain_name(crawl.pk), dir_fd=archives)  # only if empty
    return removed


__all__ = [
    "Kept", "Limits", "Refused", "Removed", "adopt_unrecorded", "archived_crawl_ids",
    "collect_session", "collect_wacz", "delete_files", "folder", "forget_archived",
    "forget_uploaded", "kept_pages", "move_leftovers",
    "read_tail", "regular_file", "sha256_fd", "write_config", "write_private",
]

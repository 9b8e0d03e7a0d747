"""The file guard: every folder and file the runner touches under a crawler's folder goes
through these functions (runner/archive.py's steps, the imports of runner/intake.py).

    with folder(data_dir, CRAWLS, crawl_id, "0") as fd, regular_file(fd, name, max_bytes) as (f, st):
        data = read_at(f, st.st_size, 0)

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
import errno
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from archiver.conf import Settings
from archiver.errors import ArchiverError

ARCHIVES = "archives"  # data_dir/archives/<crawl>/: the runner's own folder of kept files
CRAWLS = "crawls"  # data_dir/crawls/<crawl>/<instance>/: a crawler's folder (hostile)
CHUNK = 1 << 20
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

"""Keeping a crawl's archives: the one file boundary between the runner and its crawlers.

    kept = collect_wacz(data_dir, crawl, process, now)      # the session's WACZ, moved and recorded
    gone = forget_archived(data_dir, crawl.pk, process.instance, kept.files[0])
    kept, gone = collect_session(data_dir, crawl, process, now)  # both, for an exited instance
    kept = move_leftovers(data_dir, crawl, process, now)    # WARCs no WACZ holds (a crawler that died)
    kept = adopt_unrecorded(data_dir, crawl, now)           # files in archives/ that no row records
    done = delete_files(data_dir, crawl)                    # cancel and retention only
    write_config(data_dir, crawl.pk, instance, "crawler.json", data)  # never through a link

A WACZ's members and page lists are read by runner/wacz_members.py.

Every result carries `warnings`: readable sentences for the crawl's log (they are logged here
too); `Refused` is raised only by write_config. OSError means the disk itself failed (full,
read-only): nothing was lost and the next call retries. Limits.of(settings) gives the bounds
(ARCHIVER_ARCHIVE_MAX_BYTES is the size cap).

What the boundary guarantees, and why, is said in runner/file_guard.py: every
function here goes through it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from crawls import storage
from crawls.models import Crawl, CrawlFile, Process

# Limits, Refused, ARCHIVES, CRAWLS, CHUNK, read_tail and write_config are also the runner's
# other modules' way in (archive.Limits, archive.write_config ...).
from runner.file_guard import (  # noqa: F401
    ARCHIVES,
    CHUNK,
    CRAWLS,
    Limits,
    Refused,
    check_regular,
    entries,
    folder,
    make_private,
    move_in,
    open_dir,
    plain_name,
    read_tail,
    regular_file,
    remove_checked,
    sha256_fd,
    write_config,
)
from runner.wacz_members import KEPT_FOLDERS, page_entries, session_files, zip_members

log = logging.getLogger(__name__)

INDEX_FOLDERS = (("warc-cdx", ".cdx"), ("warc-cdxj", ".cdxj"))  # per-WARC indexes go with it
WARC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}\.warc(\.gz)?")  # kept as it is
KEPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,240}\.(wacz|warc|warc\.gz)")  # < NAME_MAX


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


def kept_pages(data_dir: Path, kept: CrawlFile, limits: Limits = Limits()) -> Iterator[dict]:
    """The entries (JSON objects) of a kept WACZ's page lists, read through the guard.
    Refused or OSError when the file cannot be read or costs too much (see page_entries)."""
    parts = kept_parts(kept)
    with folder(data_dir, *parts[:-1]) as archives, \
            regular_file(archives, parts[-1], limits.file_bytes) as (fd, st):
        yield from page_entries(fd, st.st_size, limits)




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
    "read_tail", "regular_file", "sha256_fd", "write_config",
]

"""The search index fed from kept archives: the title and text of every page entry of a kept
WACZ's page lists (pages/pages.jsonl, `--text to-pages`) become PageText rows, which the
database indexes (crawls/search.py).

Off supervision: a periodic step takes one file per call (`index_next`), whose reading is
bounded by the page-list limits of runner/wacz_members.py; an archive in the bucket is read there
by ranged GETs (its zip directory and page lists, never its WARCs). A file is won with a lease
(CrawlFile.index_retry_at), and its rows are replaced in one transaction, so a pass that is
interrupted (a crash, a stop) leaves the file as it was and is taken again when the lease
runs out; `archiver reindex` asks for files to be indexed again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.db import transaction

from crawls import storage
from crawls.models import INDEX_RETRY, TEXT_INDEXED, CrawlFile, PageText
from crawls.models.search import PageRow
from runner import archive, wacz_members

log = logging.getLogger("runner.daemon")


def index_next(data_dir: Path, now: dt.datetime, stop: threading.Event | None = None,
               files: Iterable[CrawlFile] | None = None,
               store: storage.ObjectStore | None = None) -> bool:
    """Index the next kept file due (of `files`, default every one): whether one was.
    `store` is the bucket of ARCHIVER_STORAGE_URL, if any."""
    queue = CrawlFile.objects.to_index(now) if files is None else files
    for file in queue.order_by("created_at", "pk")[:5]:
        if CrawlFile.objects.claim_index(file.pk, file.index_retry_at, now):
            index_file(data_dir, file, now, stop, store)
            return True
    return False


def index_file(data_dir: Path, file: CrawlFile, now: dt.datetime,
               stop: threading.Event | None = None, store: storage.ObjectStore | None = None) -> int:
    """Replace the file's PageText rows with what its page lists hold: how many."""
    limits = archive.Limits(stop=stop)
    try:
        with transaction.atomic(), kept_entries(data_dir, file, limits, store) as entries:
            PageText.objects.filter(file=file).delete()
            unchanged: list[tuple[str, dt.datetime | None]] = []
            count = PageText.objects.add(file.crawl_id, file.pk, page_rows(entries, unchanged))
            # After the copy: PostgreSQL's connection runs no query while it copies.
            count += PageText.objects.add(file.crawl_id, file.pk, list(kept_rows(file, unchanged)))
    except (archive.Refused, OSError, storage.StorageError) as exc:
        if stop is not None and stop.is_set():  # the runner stops: nothing written, due again
            file.index_failed("interrupted", now)
            return 0
        log.warning("crawl %s: cannot index %s (%s)", file.crawl_id, file.path, exc)
        file.index_failed(str(exc), now + INDEX_RETRY)
        return 0
    file.mark_indexed(now)
    return count


@contextlib.contextmanager
def kept_entries(data_dir: Path, file: CrawlFile, limits: archive.Limits,
                 store: storage.ObjectStore | None) -> Iterator[Iterator[dict]]:
    """The entries of the kept file's page lists, wherever it is kept."""
    if not storage.is_object(file):
        yield archive.kept_pages(data_dir, file, limits)
        return
    if store is None or store.target.root != file.root:
        raise archive.Refused(f"it is in {file.root}, a bucket ARCHIVER_STORAGE_URL does not name")
    with store.open(file.path, file.size) as handle:
        yield wacz_members.page_entries(handle, file.size, limits)


def page_rows(entries: Iterator[dict],
              unchanged: list[tuple[str, dt.datetime | None]] | None = None) -> Iterator[PageRow]:
    """The entries that are pages (a URL, and a title or a text), bounded, without the NULs
    PostgreSQL's text refuses. A page the server said was not modified (a 304 to a
    conditional GET) has no text of its own: its URL and time go into `unchanged`."""
    for entry in entries:
        url, title, text = entry.get("url"), entry.get("title"), entry.get("text")
        if not isinstance(url, str) or not url:
            continue  # the list's header, or not a page
        title = title if isinstance(title, str) else ""
        text = text if isinstance(text, str) else ""
        if not (title or text) and entry.get("notModified") is True and unchanged is not None:
            unchanged.append((url[:8000], _time(entry.get("ts"))))
        if title or text:
            yield (_clean(url[:8000]), _clean(title[:2000]), _clean(text[:TEXT_INDEXED]),
                   _time(entry.get("ts")))


def kept_rows(file: CrawlFile, unchanged: list[tuple[str, dt.datetime | None]]) -> Iterator[PageRow]:
    """The unchanged pages with the title and text of the org's newest indexed capture of
    each URL (in slices: a database takes only so many parameters in one query)."""
    org = file.crawl.org_id
    for start in range(0, len(unchanged), 500):
        part = dict(unchanged[start:start + 500])
        kept = {}
        for url, title, text in (PageText.objects.filter(crawl__org_id=org, url__in=part)
                                 .exclude(file=file).order_by("captured_at", "pk")
                                 .values_list("url", "title", "text")):
            kept[url] = (title, text)  # the newest last, so it wins
        for url, at in part.items():
            if url in kept:
                yield (url, *kept[url], at)


def _clean(value: str) -> str:
    return value.replace("\x00", "") if "\x00" in value else value


def _time(value) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)

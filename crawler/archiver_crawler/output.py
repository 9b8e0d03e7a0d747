"""What a session writes in `<cwd>/collections/<collection>/`: its WARC, its lines of
pages/pages.jsonl and, at the end, the WACZ of every WARC there (uploaded with a store)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from archiver_crawler.config import CrawlConfig
from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.errors import UploadFailed
from archiver_crawler.state import CrawlState
from archiver_crawler.upload import interpolate, report, upload
from archiver_crawler.wacz import build_wacz, warc_files
from archiver_crawler.warc import Exchange, WarcFile, safe_instance_id, warc_instance

logger = logging.getLogger(__name__)

PAGES_HEADER = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}


class PagesFile:
    """pages/pages.jsonl, appended line by line (O_APPEND keeps instances' lines whole)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            self._create_with_header(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)

    @staticmethod
    def _create_with_header(path: Path) -> None:
        """The file appears with its header already in it (a hard link of a finished file),
        so another instance starting at the same moment never appends before the header."""
        draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        draft.write_text(json.dumps(PAGES_HEADER) + "\n", encoding="utf-8")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # the other instance won; its header is in place
        finally:
            draft.unlink()

    def append(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


class Output:
    """The session's files, each opened when first written to."""

    def __init__(self, config: CrawlConfig, instance_id: str):
        self.config = config
        self.instance_id = instance_id
        self.dir = config.collection_dir
        self.warc: WarcFile | None = None
        self.pages: PagesFile | None = None
        self.known: KnownPayloads | None = None  # set at start when the crawl deduplicates
        self.revisits = 0
        # This session's page lines: with the page text they go into the WACZ at about the
        # size of the pages' HTML, so the size limit and the reported size count them.
        self.page_bytes = 0

    def archive(self, exchange: Exchange) -> int:
        """Write one request/response pair to this session's WARC; return the session's size
        (its WARC and its page lines)."""
        if self.warc is None:
            self.warc = WarcFile(self.dir / "archive", self.instance_id, self.config.collection)
        self.revisits += self.warc.write(exchange, self.known)
        return self.warc.size + self.page_bytes

    def write_records(self, writer) -> int:
        """`writer(warc)` writes a page's records (browser mode); the session's size after."""
        if self.warc is None:
            self.warc = WarcFile(self.dir / "archive", self.instance_id, self.config.collection)
        writer(self.warc)
        return self.warc.size + self.page_bytes

    @property
    def warc_name(self) -> str | None:
        return self.warc.name if self.warc else None

    def add_page(self, line: str) -> None:
        if self.pages is None:
            self.pages = PagesFile(self.dir / "pages" / "pages.jsonl")
        self.pages.append(line)
        self.page_bytes += len(line.encode()) + 1

    def close(self) -> None:
        if self.warc is not None:
            self.warc.close()
        if self.pages is not None:
            self.pages.close()

    def has_warcs(self) -> bool:
        return bool(warc_files(self.dir))

    def archive_size(self) -> int:
        """Bytes of this instance's WARC files (all sessions) in archive/, and of this
        session's page lines."""
        own = safe_instance_id(self.instance_id)
        total = self.page_bytes
        for path in warc_files(self.dir):
            if warc_instance(path.name) == own:
                try:
                    total += path.stat().st_size
                except FileNotFoundError:
                    continue
        return total

    async def package(self, state: CrawlState, main_page: str | None, completed: bool) -> bool:
        """The WACZ of every WARC in archive/, uploaded when a store is configured; False
        when the upload failed (its WARCs stay: the relaunch packages and uploads again)."""
        await state.set_status("generate-wacz")
        wacz = await asyncio.to_thread(build_wacz, self.dir, self.config.collection, main_page)
        if wacz is None or self.config.store is None:
            return True
        try:
            await self.upload(state, wacz, completed)
        except UploadFailed as exc:
            logger.error("%s", exc, extra={"context": "storage"})
            return False
        return True

    async def upload(self, state: CrawlState, wacz: Path, completed: bool) -> None:
        """The session's WACZ to STORE_ENDPOINT_URL, then reported to WEBHOOK_URL."""
        store = self.config.store
        await state.set_status("uploading-wacz")
        name = interpolate(store.filename, self.config.crawl_id, self.instance_id,
                           datetime.now(UTC))
        body = await asyncio.to_thread(upload, store, wacz, name, self.config.crawl_id, completed)
        await report(store, body)

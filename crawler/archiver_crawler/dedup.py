"""Payloads the org has kept already: a response whose body is one of them is written as a
`revisit` record (identical payload digest) instead of the body.

The runner fills, before launch, the Redis hash `<crawl id>:dedup` (payload digest ->
"<WARC-Date> <file key> <URL>") and `<crawl id>:dedup:files` (file key -> the JSON entry the
WACZ's datapackage.json names under relation.requires). A hash rather than a file: every
launcher (local, docker, swarm) already hands its crawler a Redis, so nothing more is mounted.
An instance reads the hash once at start into a dict of digest strings (bounded: one entry
per kept payload of the org, about 150 bytes each); lookups are then a dict read.

Conditional recrawls: `<crawl id>:dedup:urls` maps a URL the org kept with an ETag or a
Last-Modified to the JSON of its newest kept record (`Kept`). Its GETs carry If-None-Match /
If-Modified-Since, and a 304 is written as a `server-not-modified` revisit of that record.
A 304 has no body to read links from: the first 304 of a host hands on, once, the org's
other kept URLs of that host (its pages as links, through the scope; the rest as
requisites), which is what an unchanged page linked to when it was kept.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
HTML_TYPES = {"text/html", "application/xhtml+xml"}
REQUIRES_FILE = "requires.jsonl"
_SCAN = 5000


@dataclass(frozen=True)
class Original:
    """Where a payload was first kept: its record's URL and WARC-Date, and the kept file."""

    url: str
    date: str
    file_key: str


@dataclass(frozen=True)
class Kept:
    """A URL's newest kept response with validators: what a conditional GET names, and what
    its 304 revisit refers to (the record's WARC-Date and payload digest, the kept file)."""

    url: str
    digest: str
    date: str
    file_key: str
    mime: str = ""
    etag: str = ""
    last_modified: str = ""

    @property
    def original(self) -> Original:
        return Original(url=self.url, date=self.date, file_key=self.file_key)

    def conditions(self) -> list[tuple[str, str]]:
        """The conditional request headers (RFC 9110 13.1): both when both are known; a
        server that honours If-None-Match then ignores If-Modified-Since."""
        found = []
        if self.etag:
            found.append(("If-None-Match", self.etag))
        if self.last_modified:
            found.append(("If-Modified-Since", self.last_modified))
        return found


def parse_kept(url: str, value: str) -> Kept | None:
    """The runner's JSON entry of `url`, or None for one of the wrong shape."""
    try:
        fields = json.loads(value)
        kept = Kept(url=url, digest=str(fields["digest"]), date=str(fields["date"]),
                    file_key=str(fields["file"]), mime=str(fields.get("mime") or ""),
                    etag=str(fields.get("etag") or ""),
                    last_modified=str(fields.get("lastModified") or ""))
    except (ValueError, KeyError, TypeError):
        return None
    # A header value holding a line break would let the index write headers of its own.
    if any(c in kept.etag + kept.last_modified for c in "\r\n"):
        return None
    return kept


def parse_entry(value: str) -> Original:
    date, file_key, url = value.split(" ", 2)
    return Original(url=url, date=date, file_key=file_key)


def format_entry(date: str, file_key: str, url: str) -> str:
    return f"{date} {file_key} {url}"


class KnownPayloads:
    """The org's kept payloads; `revisit_of(digest)` decides "revisit or full record"
    (None: write the full record). Shared by HTTP mode and the browser engine. And the
    URLs kept with validators: `conditions(url)` for a GET, `revisit_of_not_modified(url)`
    for its 304."""

    def __init__(self, entries: dict[str, str] | None = None,
                 files: dict[str, str] | None = None, collection_dir: Path | None = None,
                 urls: dict[str, str] | None = None):
        self._entries = entries or {}
        self._files = files or {}
        self._collection_dir = collection_dir
        self._required: set[str] = set()
        self._urls = urls or {}
        self._hosts_handed: set[str] = set()

    def __len__(self) -> int:
        return len(self._entries)

    def __str__(self) -> str:
        return (f"{len(self)} payload(s) the org kept, {len(self._urls)} URL(s) of them "
                "with validators")

    def revisit_of(self, digest: str) -> Original | None:
        value = self._entries.get(digest)
        if value is None:
            return None
        original = parse_entry(value)
        self._require(original.file_key)
        return original

    def kept(self, url: str) -> Kept | None:
        value = self._urls.get(url)
        return None if value is None else parse_kept(url, value)

    def conditions(self, url: str) -> list[tuple[str, str]]:
        """The validators to send with a GET of `url` (none when the org kept none)."""
        kept = self.kept(url)
        return kept.conditions() if kept is not None else []

    def revisit_of_not_modified(self, url: str) -> Kept | None:
        """The kept record a 304 to `url` stands for (its archive noted as required)."""
        kept = self.kept(url)
        if kept is None:
            return None
        self._require(kept.file_key)
        return kept

    def kept_urls(self, host: str) -> tuple[list[str], list[str]]:
        """The org's kept URLs of `host`, once per instance: (pages, other resources)."""
        if host in self._hosts_handed:
            return [], []
        self._hosts_handed.add(host)
        pages, others = [], []
        for url, value in self._urls.items():
            if urlsplit(url).netloc != host:
                continue
            kept = parse_kept(url, value)
            if kept is not None:
                (pages if kept.mime in HTML_TYPES else others).append(url)
        return pages, others

    def _require(self, file_key: str) -> None:
        if file_key not in self._required:
            self._required.add(file_key)
            self._note_required(file_key)

    def _note_required(self, file_key: str) -> None:
        """Kept beside the WARCs (O_APPEND: instances share the folder), so the WACZ built at
        the end, by whichever instance, names every archive its revisits point into."""
        entry = self._files.get(file_key)
        if entry is None or self._collection_dir is None:
            return
        self._collection_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._collection_dir / REQUIRES_FILE,
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(json.loads(entry), sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)

    @classmethod
    async def load(cls, redis, crawl_id: str, collection_dir: Path) -> KnownPayloads:
        entries: dict[str, str] = {}
        async for digest, value in redis.hscan_iter(f"{crawl_id}:dedup", count=_SCAN):
            entries[_text(digest)] = _text(value)
        urls: dict[str, str] = {}
        async for url, value in redis.hscan_iter(f"{crawl_id}:dedup:urls", count=_SCAN):
            urls[_text(url)] = _text(value)
        files = {_text(k): _text(v) for k, v in
                 (await redis.hgetall(f"{crawl_id}:dedup:files")).items()}
        return cls(entries, files, collection_dir, urls)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def required_archives(collection_dir: Path) -> list[dict]:
    """The relation.requires list of the WACZ: each archive a revisit points into, once."""
    path = collection_dir / REQUIRES_FILE
    if not path.exists():
        return []
    seen: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by a killed instance
        seen.setdefault(entry.get("filename", ""), entry)
    return [seen[name] for name in sorted(seen)]

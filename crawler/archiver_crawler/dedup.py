"""Payloads the org has kept already: a response whose body is one of them is written as a
`revisit` record (identical payload digest) instead of the body.

The runner fills, before launch, the Redis hash `<crawl id>:dedup` (payload digest ->
"<WARC-Date> <file key> <URL>") and `<crawl id>:dedup:files` (file key -> the JSON entry the
WACZ's datapackage.json names under relation.requires). A hash rather than a file: every
launcher (local, docker, swarm) already hands its crawler a Redis, so nothing more is mounted.
An instance reads the hash once at start into a dict of digest strings (bounded: one entry
per kept payload of the org, about 150 bytes each); lookups are then a dict read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
REQUIRES_FILE = "requires.jsonl"
_SCAN = 5000


@dataclass(frozen=True)
class Original:
    """Where a payload was first kept: its record's URL and WARC-Date, and the kept file."""

    url: str
    date: str
    file_key: str


def parse_entry(value: str) -> Original:
    date, file_key, url = value.split(" ", 2)
    return Original(url=url, date=date, file_key=file_key)


def format_entry(date: str, file_key: str, url: str) -> str:
    return f"{date} {file_key} {url}"


class KnownPayloads:
    """The org's kept payloads; `revisit_of(digest)` decides "revisit or full record"
    (None: write the full record). Shared by HTTP mode and the browser engine."""

    def __init__(self, entries: dict[str, str] | None = None,
                 files: dict[str, str] | None = None, collection_dir: Path | None = None):
        self._entries = entries or {}
        self._files = files or {}
        self._collection_dir = collection_dir
        self._required: set[str] = set()

    def __len__(self) -> int:
        return len(self._entries)

    def revisit_of(self, digest: str) -> Original | None:
        value = self._entries.get(digest)
        if value is None:
            return None
        original = parse_entry(value)
        if original.file_key not in self._required:
            self._required.add(original.file_key)
            self._note_required(original.file_key)
        return original

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
        files = {_text(k): _text(v) for k, v in
                 (await redis.hgetall(f"{crawl_id}:dedup:files")).items()}
        return cls(entries, files, collection_dir)


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

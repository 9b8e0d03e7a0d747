"""What crawlers write into Redis, read back in one round trip; and the commands we send them.

Keys follow crawler-protocol.md. Each crawl has a Redis database of its own (the crawler
keeps some keys without a crawl-id prefix), allocated here and recorded on the crawl.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import redis

from runner.redis_server import RedisEndpoint

log = logging.getLogger(__name__)

DRAIN_BATCH = 500
FINISHED_STATUSES = ("done", "failed", "canceled")


@dataclass
class Progress:
    """One reading of a crawl's keys, plus the pages and error lines drained with it."""

    done: int = 0
    found: int = 0
    failed: int = 0
    size: int = 0
    failed_pages: list[dict] = field(default_factory=list)  # new entries of :f since the offset
    statuses: dict[str, str] = field(default_factory=dict)
    pages: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    more: bool = False  # a batch was full: more pages or errors are waiting


class ProgressStore:
    """A crawl's progress and commands, over one Redis server with a database per crawl."""

    def __init__(self, endpoint: RedisEndpoint):
        self.endpoint = endpoint
        self._clients: dict[int, redis.Redis] = {}

    def client(self, db: int) -> redis.Redis:
        if db not in self._clients:
            self._clients[db] = self.endpoint.client(db)
        return self._clients[db]

    def forget(self, db: int) -> None:
        client = self._clients.pop(db, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        """Close every connection; the store may be used again afterwards (it reconnects)."""
        for db in list(self._clients):
            self.forget(db)

    # --- reading ---------------------------------------------------------------------

    def read(self, db: int, crawl_id: str, failed_offset: int = 0, batch: int = DRAIN_BATCH) -> Progress:
        """Counters, statuses, a batch of pages and errors, and the failed pages after
        `failed_offset` (:f only grows), in ONE pipeline."""
        k = crawl_id
        pipe = self.client(db).pipeline(transaction=False)
        pipe.get(f"{k}:d")
        pipe.scard(f"{k}:s")
        pipe.llen(f"{k}:extraSeeds")
        pipe.scard(f"{k}:excluded")
        pipe.lrange(f"{k}:f", failed_offset, failed_offset + batch - 1)
        pipe.hvals(f"{k}:size")
        pipe.hgetall(f"{k}:status")
        pipe.rpop(f"{k}:pages", batch)
        pipe.rpop(f"{k}:e", batch)
        done, seen, extra, excluded, failed, sizes, statuses, pages, errors = pipe.execute()
        failed_pages = _parse_lines(failed, crawl_id, "failed page")
        pages, errors = pages or [], errors or []
        return Progress(
            done=int(done or 0),
            found=max(seen - extra - excluded, 0),
            failed=failed_offset + len(failed),
            failed_pages=failed_pages,
            size=sum(int(v) for v in sizes if str(v).isdigit()),
            statuses=statuses,
            pages=_parse_lines(pages, crawl_id, "page"),
            errors=_parse_lines(errors, crawl_id, "error line"),
            more=len(pages) == batch or len(errors) == batch or len(failed) == batch,
        )

    def drain(self, db: int, crawl_id: str, batch: int = DRAIN_BATCH) -> tuple[list[dict], list[dict]]:
        """One more batch of pages and error lines (RPOP: oldest first)."""
        pipe = self.client(db).pipeline(transaction=False)
        pipe.rpop(f"{crawl_id}:pages", batch)
        pipe.rpop(f"{crawl_id}:e", batch)
        pages, errors = pipe.execute()
        return _parse_lines(pages or [], crawl_id, "page"), _parse_lines(errors or [], crawl_id, "error line")

    # --- commands --------------------------------------------------------------------

    def set_flag(self, db: int, crawl_id: str, flag: str) -> None:
        """`stopping`, `canceled` or `paused`: the crawlers poll these."""
        assert flag in ("stopping", "canceled", "paused"), flag
        self.client(db).set(f"{crawl_id}:{flag}", "1")

    def statuses(self, db: int, crawl_id: str) -> dict[str, str]:
        return self.client(db).hgetall(f"{crawl_id}:status")

    def clear_flag(self, db: int, crawl_id: str, flag: str) -> None:
        self.client(db).delete(f"{crawl_id}:{flag}")

    def stop_one(self, db: int, crawl_id: str, hostname: str) -> None:
        self.client(db).hset(f"{crawl_id}:stopone", hostname, "1")

    def size(self, db: int, crawl_id: str) -> int:
        """Bytes the crawl's instances hold in their archive/ folders, all together."""
        return sum(int(v) for v in self.client(db).hvals(f"{crawl_id}:size") if str(v).isdigit())

    def set_size(self, db: int, crawl_id: str, hostname: str, size: int) -> None:
        """What an exited instance has left in archive/ (its kept WACZ holds the rest)."""
        self.client(db).hset(f"{crawl_id}:size", hostname, size)

    def forget_instance(self, db: int, crawl_id: str, hostname: str) -> None:
        """After a scaled-down instance exited: drop its fields so it is not waited for."""
        pipe = self.client(db).pipeline()
        pipe.hdel(f"{crawl_id}:stopone", hostname)
        pipe.hdel(f"{crawl_id}:status", hostname)
        pipe.execute()

    def add_exclusion(self, db: int, hostname: str, regex: str) -> None:
        self.client(db).rpush(f"{hostname}:msg", json.dumps({"type": "addExclusion", "regex": regex}))

    def flush(self, db: int) -> None:
        self.client(db).flushdb()

    # --- allocation --------------------------------------------------------------------

    def free_db(self, held: set[int]) -> int | None:
        """The lowest database index in 1..databases-1 that no active crawl holds."""
        for index in range(1, self.endpoint.databases):
            if index not in held:
                return index
        return None


def _parse_lines(lines: list[str], crawl_id: str, what: str) -> list[dict]:
    parsed = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            log.warning("crawl %s: skipping a %s that is not JSON: %.80r", crawl_id[:8], what, line)
            continue
        if isinstance(value, dict):
            parsed.append(value)
    return parsed

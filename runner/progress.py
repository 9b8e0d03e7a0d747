"""What crawlers write into Redis, read back in one round trip; and the commands we send them.

Keys follow crawler-protocol.md. Each crawl has a Redis database of its own (the crawler
keeps some keys without a crawl-id prefix), allocated here and recorded on the crawl.

What a crawler wrote is hostile input: a key of the wrong type or a counter that is not a
number raises ProgressCorrupt (naming the key), never a bare ValueError, and never looks
like "Redis unreachable" (only connection and timeout errors are redis.ConnectionError /
redis.TimeoutError). Page and error lines that are not JSON objects are skipped.

Isolation: `grant()` gives each crawl an ACL user of its own that can only use the crawl's
database and no administrative command; `revoke()` takes it away (docs/runner.md, Redis).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeVar

import redis

from archiver.errors import ProgressCorrupt
from runner.redis_server import RedisEndpoint

log = logging.getLogger(__name__)

DRAIN_BATCH = 500
FINISHED_STATUSES = ("done", "failed", "canceled")


class Flag(StrEnum):
    """A command to every crawler of a crawl: the key `<crawl>:<flag>` they poll."""

    STOPPING = "stopping"  # stop after the pages in progress, keep what was archived
    CANCELED = "canceled"  # stop at once, keep nothing
    PAUSED = "paused"  # stop after the pages in progress; the queue stays in Redis

# What a crawl's ACL user may not run, on top of every @dangerous and @admin command.
# Most are in those categories already; they are listed so that no future change of a
# category can let one through. MOVE and COPY ... DB reach another database; FUNCTION and
# SCRIPT FLUSH/KILL act on the whole server.
DENIED_COMMANDS = (
    "flushall", "flushdb", "config", "shutdown", "replicaof", "slaveof", "acl", "swapdb",
    "move", "copy", "migrate", "debug", "monitor", "client|kill", "client|list", "keys",
    "function", "script|flush", "script|kill",
)
# The keys read() reads, in its pipeline's order, with the type the crawlers give them.
READ_KEYS = (("d", "string"), ("s", "set"), ("extraSeeds", "list"), ("excluded", "set"),
             ("f", "list"), ("size", "hash"), ("status", "hash"), ("pages", "list"), ("e", "list"))
MEMORY_SAMPLE = 1000  # keys whose MEMORY USAGE memory() adds up; more are estimated
PRESSURE_SHARE = 0.5  # of maxmemory: over it, every crawl's database is measured every tick
T = TypeVar("T")
CRAWL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


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
    pages_taken: int = 0  # raw :pages lines read, to be let go (ProgressStore.let_go) once stored


class ProgressStore:
    """A crawl's progress and commands, over one Redis server with a database per crawl."""

    def __init__(self, endpoint: RedisEndpoint):
        self.endpoint = endpoint
        self._clients: dict[int, redis.Redis] = {}
        self._granted: dict[str, int] = {}  # crawl id -> database, to grant again after a restart
        self._shared_reason: str | None = None  # why crawls share the admin identity, once known

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

    def reconnect(self, endpoint: RedisEndpoint) -> None:
        """Use `endpoint` from now on (RedisWatch.check() returned it: the server restarted
        or moved). A restarted server has lost its ACL users: the crawls this store granted
        are granted again (grant() is idempotent and the passwords are derived, so crawlers
        reconnect with the credentials they already have)."""
        self.close()
        self.endpoint = endpoint
        self._shared_reason = None
        for crawl_id, db in list(self._granted.items()):
            self.grant(db, crawl_id)

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
        pipe.hgetall(f"{k}:size")
        pipe.hgetall(f"{k}:status")
        pipe.lrange(f"{k}:pages", -batch, -1)
        pipe.rpop(f"{k}:e", batch)
        keys = [f"{k}:{name}" for name, _ in READ_KEYS]
        return self._run(db, pipe, keys, [kind for _, kind in READ_KEYS], popped=(8,),
                         parse=lambda results: _progress(crawl_id, failed_offset, batch, *results))

    def memory(self, db: int, sample: int = MEMORY_SAMPLE) -> int:
        """About how many bytes database `db` holds: MEMORY USAGE of up to `sample` of its
        keys (whatever their names: a crawler may write any key there), scaled up by DBSIZE
        when it has more. A few round trips, so the runner calls it every so often."""
        client = self.client(db)
        count = client.dbsize()
        names = list(itertools.islice(client.scan_iter(count=sample), sample))
        if not names:
            return 0
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.memory_usage(name)
        used = sum(size or 0 for size in pipe.execute())  # a key gone meanwhile counts 0
        return used * max(count, len(names)) // len(names)

    def drain(self, db: int, crawl_id: str, batch: int = DRAIN_BATCH) -> tuple[list[dict], list[dict], int]:
        """One more batch of pages (read, oldest first, not removed) and error lines (popped),
        and how many raw page lines were read, for let_go()."""
        pipe = self.client(db).pipeline(transaction=False)
        pipe.lrange(f"{crawl_id}:pages", -batch, -1)
        pipe.rpop(f"{crawl_id}:e", batch)
        return self._run(db, pipe, [f"{crawl_id}:pages", f"{crawl_id}:e"], ["list", "list"],
                         popped=(1,), parse=lambda results: (
                             _parse_lines(_oldest_first(results[0]), crawl_id, "page"),
                             _parse_lines(results[1] or [], crawl_id, "error line"),
                             len(results[0] or [])))

    def let_go(self, db: int, crawl_id: str, taken: int) -> None:
        """Remove the `taken` oldest page lines, once what they say is in the database.

        Page records are read without removing them and let go only after they are stored,
        so a runner killed between the two leaves them for the next reader (which stores them
        again: storing is by URL, the same record twice changes nothing). Without this a
        runner that died mid-tick lost the pages it had popped, and with its host gone no
        archive and no row knew them. Crawlers only push at the head and only the crawl's
        lease holder reads, so the `taken` at the tail are the ones read."""
        if taken:
            self.client(db).ltrim(f"{crawl_id}:pages", 0, -(taken + 1))

    def statuses(self, db: int, crawl_id: str) -> dict[str, str]:
        pipe = self.client(db).pipeline(transaction=False)
        pipe.hgetall(f"{crawl_id}:status")
        return self._run(db, pipe, [f"{crawl_id}:status"], ["hash"], parse=lambda results: results[0])

    def size(self, db: int, crawl_id: str) -> int:
        """Bytes the crawl's instances hold in their archive/ folders, all together."""
        pipe = self.client(db).pipeline(transaction=False)
        pipe.hgetall(f"{crawl_id}:size")
        return self._run(db, pipe, [f"{crawl_id}:size"], ["hash"],
                         parse=lambda results: _total_size(f"{crawl_id}:size", results[0]))

    def _run(self, db: int, pipe, keys: list[str], expected: list[str], parse: Callable[[list], T],
             popped: tuple[int, ...] = ()) -> T:
        """Run `pipe` (one command per key, of the `expected` types) and `parse` its results.
        Connection errors raise as they are; a key of the wrong type or a value `parse`
        refuses raises ProgressCorrupt. Before anything raises, what the pipeline popped
        (the `popped` indexes: error lines; page lines are only read) is pushed back, so
        nothing is lost to a bad counter."""
        results = pipe.execute(raise_on_error=False)
        try:
            for key, kind, result in zip(keys, expected, results, strict=True):
                if isinstance(result, Exception):
                    raise self._classified(db, key, kind, result)
            return parse(results)
        except (ProgressCorrupt, redis.RedisError):
            self._give_back(db, [(keys[i], results[i]) for i in popped])
            raise

    def _classified(self, db: int, key: str, expected: str, error: Exception) -> Exception:
        if not (isinstance(error, redis.ResponseError) and str(error).startswith("WRONGTYPE")):
            return error  # unreachable, out of memory, read-only...: the server's fault, not the data's
        try:
            actual = self.client(db).type(key)
        except redis.RedisError:
            actual = "another type"
        return ProgressCorrupt(key, f"has the wrong type ({actual}, expected {expected})")

    def _give_back(self, db: int, popped: list[tuple[str, object]]) -> None:
        """RPUSH popped lines back in their order: RPOP took the oldest first from the right."""
        for key, lines in popped:
            if not isinstance(lines, list) or not lines:
                continue
            try:
                self.client(db).rpush(key, *reversed(lines))
            except redis.RedisError as exc:
                log.error("could not put %d lines back into Redis key %s (%s); they are lost",
                          len(lines), key, type(exc).__name__)

    # --- commands --------------------------------------------------------------------

    def set_flag(self, db: int, crawl_id: str, flag: Flag) -> None:
        self.client(db).set(f"{crawl_id}:{Flag(flag)}", "1")

    def clear_flag(self, db: int, crawl_id: str, flag: Flag) -> None:
        self.client(db).delete(f"{crawl_id}:{Flag(flag)}")

    def stop_one(self, db: int, crawl_id: str, hostname: str) -> None:
        key = f"{crawl_id}:stopone"
        with self._typed(db, key, "hash"):
            self.client(db).hset(key, hostname, "1")

    def set_size(self, db: int, crawl_id: str, hostname: str, size: int) -> None:
        """What an exited instance has left in archive/ (its kept WACZ holds the rest)."""
        key = f"{crawl_id}:size"
        with self._typed(db, key, "hash"):
            self.client(db).hset(key, hostname, size)

    def forget_instance(self, db: int, crawl_id: str, hostname: str) -> None:
        """After a scaled-down instance exited: drop its fields so it is not waited for."""
        pipe = self.client(db).pipeline(transaction=False)
        pipe.hdel(f"{crawl_id}:stopone", hostname)
        pipe.hdel(f"{crawl_id}:status", hostname)
        self._run(db, pipe, [f"{crawl_id}:stopone", f"{crawl_id}:status"], ["hash", "hash"],
                  parse=lambda results: None)

    def requeue(self, db: int, crawl_id: str, entries: dict[str, int]) -> None:
        """Queue entries ({JSON as crawlers queue them: depth}) of pages counted done whose
        archive is lost, and count them undone, in one transaction (runner/handover.py)."""
        if not entries:
            return
        pipe = self.client(db).pipeline(transaction=True)
        pipe.zadd(f"{crawl_id}:q", entries)
        pipe.decrby(f"{crawl_id}:d", len(entries))
        self._run(db, pipe, [f"{crawl_id}:q", f"{crawl_id}:d"], ["zset", "string"],
                  parse=lambda results: None)

    def add_exclusion(self, db: int, hostname: str, regex: str) -> None:
        key = f"{hostname}:msg"
        with self._typed(db, key, "list"):
            self.client(db).rpush(key, json.dumps({"type": "addExclusion", "regex": regex}))

    @contextlib.contextmanager
    def _typed(self, db: int, key: str, expected: str) -> Iterator[None]:
        """A write to `key` that a crawler gave the wrong type raises ProgressCorrupt."""
        try:
            yield
        except redis.ResponseError as exc:
            raise self._classified(db, key, expected, exc) from exc

    def flush(self, db: int) -> None:
        # ASYNC: the keys are gone at once and their memory is freed off Redis's main
        # thread; a synchronous flush of a full database stalls every crawl's commands.
        self.client(db).flushdb(asynchronous=True)

    def pressed(self, share: float = PRESSURE_SHARE) -> bool:
        """Whether the server holds more than `share` of its maxmemory (never, without one):
        one INFO, so the runner can ask every tick."""
        try:
            info = self.client(0).info("memory")
        except redis.ResponseError:  # INFO refused: measured at the slow pace only
            return False
        limit = int(info.get("maxmemory", 0))
        return bool(limit) and int(info.get("used_memory", 0)) > limit * share

    # --- allocation --------------------------------------------------------------------

    def free_db(self, held: set[int]) -> int | None:
        """The lowest database index in 1..databases-1 that no active crawl holds.

        Database 0 is never a crawl's: every connection starts there, so every crawl's ACL
        user can reach it (a crawl user can SELECT only its own database)."""
        for index in range(1, self.endpoint.databases):
            if index not in held:
                return index
        return None

    # --- per-crawl identities -----------------------------------------------------------

    def grant(self, db: int, crawl_id: str) -> RedisEndpoint:
        """The endpoint crawl `crawl_id`'s crawlers use: its own ACL user `crawl-<id>`, which
        may use database `db` only (all its keys) and no administrative command. Creates
        or resets the user, so it is safe to call again (at every launch, after a restart).
        The password is derived from the admin password and the crawl id, never stored.

        When the server cannot do this (no admin password, ACL refused, Redis < 6), logs
        once and returns the shared admin endpoint: crawls are then not isolated."""
        if not CRAWL_ID.match(crawl_id):
            raise ValueError(f"not a crawl id: {crawl_id!r}")
        if self._shared_reason is None and not self.endpoint.password:
            self._share("the admin connection has no password, so a crawl password would be guessable")
        if self._shared_reason is not None:
            return self.endpoint
        user, password = crawl_user(crawl_id), crawl_password(self.endpoint.password, crawl_id)
        try:
            self.client(db).execute_command("ACL", "SETUSER", user, *crawl_rules(db, password))
        except redis.ResponseError as exc:
            self._share(f"the server refuses ACL SETUSER ({str(exc)[:80]})")
            return self.endpoint
        self._granted[crawl_id] = db
        return replace(self.endpoint, username=user, password=password)

    def revoke(self, crawl_id: str) -> None:
        """Delete crawl `crawl_id`'s ACL user and disconnect its clients (at clean-up)."""
        self._granted.pop(crawl_id, None)
        if self._shared_reason is not None or not CRAWL_ID.match(crawl_id):
            return
        admin = self.client(0)
        user = crawl_user(crawl_id)
        # "No such user" (never granted, or lost in a restart): nobody to disconnect.
        with contextlib.suppress(redis.ResponseError):
            admin.execute_command("CLIENT", "KILL", "USER", user)
        try:
            admin.execute_command("ACL", "DELUSER", user)
        except redis.ResponseError as exc:
            self._share(f"the server refuses ACL DELUSER ({str(exc)[:80]})")

    def cut_off(self, db: int, crawl_id: str) -> None:
        """Take Redis away from crawl `crawl_id`'s crawlers at once: its user off (no new
        login), then its connections closed (`off` leaves them logged in), then every key
        of its database dropped. revoke() deletes the user when the crawl is cleaned up."""
        if self._shared_reason is None and CRAWL_ID.match(crawl_id):
            admin = self.client(0)
            with contextlib.suppress(redis.ResponseError):  # lost in a restart: nobody to stop
                admin.execute_command("ACL", "SETUSER", crawl_user(crawl_id), "off")
                admin.execute_command("CLIENT", "KILL", "USER", crawl_user(crawl_id))
        self.flush(db)

    def _share(self, reason: str) -> None:
        self._shared_reason = reason
        log.warning("Redis at %s:%s: crawls share one identity and can reach each other's data: %s",
                    self.endpoint.host, self.endpoint.port, reason)


def crawl_user(crawl_id: str) -> str:
    return f"crawl-{crawl_id}"


def crawl_password(admin_password: str, crawl_id: str) -> str:
    """HMAC-SHA256(admin password, crawl id): any runner holding the admin password can
    re-create the user after a restart (which loses ACL users), and nothing is stored."""
    return hmac.new(admin_password.encode(), crawl_id.encode(), hashlib.sha256).hexdigest()


def crawl_rules(db: int, password: str) -> list[str]:
    """ACL SETUSER rules: its own database only, all keys there, no pub/sub channels, every
    command the crawlers use (strings, lists, sets, zsets, hashes, EVAL/EVALSHA, SCRIPT
    LOAD, EXPIRE...) and none that reaches the server or another database. The password
    goes over as its SHA-256 (`#`), so it is in no server-side command log."""
    return ["reset", "on", "#" + hashlib.sha256(password.encode()).hexdigest(), "~*",
            "resetchannels", "+@all", "-@dangerous", "-@admin",
            *(f"-{command}" for command in DENIED_COMMANDS), "-select", f"+select|{db}"]


def _progress(crawl_id: str, failed_offset: int, batch: int, done, seen, extra, excluded,
              failed, sizes, statuses, pages, errors) -> Progress:
    k, pages, errors = crawl_id, pages or [], errors or []
    return Progress(
        done=_count(f"{k}:d", done),
        found=max(seen - extra - excluded, 0),
        failed=failed_offset + len(failed),
        failed_pages=_parse_lines(failed, crawl_id, "failed page"),
        size=_total_size(f"{k}:size", sizes),
        statuses=statuses,
        pages=_parse_lines(_oldest_first(pages), crawl_id, "page"),
        errors=_parse_lines(errors, crawl_id, "error line"),
        more=len(pages) == batch or len(errors) == batch or len(failed) == batch,
        pages_taken=len(pages),
    )


def _oldest_first(lines: list[str] | None) -> list[str]:
    """LRANGE's slice of a list crawlers LPUSH onto, reversed: the oldest first, as RPOP gives them."""
    return list(reversed(lines or []))


def _count(key: str, raw: str | None) -> int:
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()):
        raise ProgressCorrupt(key, f"holds {_shown(raw)}, not a page count")
    return int(raw)


def _total_size(key: str, sizes: dict[str, str]) -> int:
    total = 0
    for hostname, value in sizes.items():
        if not (value.isascii() and value.isdigit()):
            raise ProgressCorrupt(key, f"field {_shown(hostname)} holds {_shown(value)}, not a byte count")
        total += int(value)
    return total


def _shown(value: str) -> str:
    """A crawler-written value for a message: quoted, escaped, at most 40 characters."""
    return repr(value[:40] + ("..." if len(value) > 40 else ""))


def _parse_lines(lines: list[str], crawl_id: str, what: str) -> list[dict]:
    """The lines that are JSON objects; the others are skipped with one warning per batch."""
    parsed, skipped = [], []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, dict):
            parsed.append(value)
        else:
            skipped.append(line)
    if skipped:
        log.warning("crawl %s: skipped %d %s line(s) that are not JSON objects, the first: %.80r",
                    crawl_id[:8], len(skipped), what, skipped[0])
    return parsed

"""The crawl's shared state in Redis, with the key names of browsertrix-crawler.

Every transition that several instances could race on is one Lua script, so that a URL is
always in exactly one of: the queue `:q`, in progress `:p`, done/failed. "Finished" is
read as one MULTI snapshot of `ZCARD :q` and `HLEN :p`; links are queued before their page
leaves `:p`, so an instance never sees an empty queue while work could still appear.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from archiver_crawler.errors import RedisUnavailable

logger = logging.getLogger(__name__)

# KEYS: q, s   ARGV: url, entry json, score, limit  -> 0 queued, 1 already seen, 2 over limit
_ADD = """
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 1 end
local limit = tonumber(ARGV[4])
if limit > 0 and redis.call('SCARD', KEYS[2]) >= limit then return 2 end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
return 0
"""

# KEYS: q, p   ARGV: owner, started  -> the claimed entry json, or nil
_CLAIM = """
local r = redis.call('ZPOPMIN', KEYS[1])
if #r == 0 then return false end
local data = cjson.decode(r[1])
data['owner'] = ARGV[1]
data['started'] = ARGV[2]
redis.call('HSET', KEYS[2], data['url'], cjson.encode(data))
return r[1]
"""

# KEYS: p, q   ARGV: owner  -> number of entries of that owner put back in the queue
_REQUEUE_OWN = """
local all = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #all, 2 do
  local data = cjson.decode(all[i + 1])
  if data['owner'] == ARGV[1] then
    redis.call('HDEL', KEYS[1], all[i])
    data['owner'] = nil
    data['started'] = nil
    redis.call('ZADD', KEYS[2], data['depth'] or 0, cjson.encode(data))
    n = n + 1
  end
end
return n
"""


@dataclass(frozen=True)
class QueueEntry:
    url: str
    seed_id: int
    depth: int
    extra_hops: int = 0

    def to_json(self) -> str:
        return json.dumps({"url": self.url, "seedId": self.seed_id, "depth": self.depth,
                           "extraHops": self.extra_hops}, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str) -> QueueEntry:
        data = json.loads(raw)
        return cls(url=data["url"], seed_id=int(data.get("seedId", 0)),
                   depth=int(data.get("depth", 0)), extra_hops=int(data.get("extraHops", 0)))


@dataclass(frozen=True)
class Commands:
    stopping: bool = False
    paused: bool = False
    canceled: bool = False
    stop_one: bool = False


class CrawlState:
    def __init__(self, client: aioredis.Redis, crawl_id: str, instance_id: str):
        self.redis = client
        self.instance_id = instance_id
        k = crawl_id
        self.q, self.s, self.p, self.d, self.f = (f"{k}:q", f"{k}:s", f"{k}:p", f"{k}:d", f"{k}:f")
        self.excluded, self.extra_seeds = f"{k}:excluded", f"{k}:extraSeeds"
        self.status, self.size = f"{k}:status", f"{k}:size"
        self.pages, self.errors = f"{k}:pages", f"{k}:e"
        self.stopping, self.paused, self.canceled = f"{k}:stopping", f"{k}:paused", f"{k}:canceled"
        self.stopone, self.assets = f"{k}:stopone", f"{k}:assets"
        self.msg = f"{instance_id}:msg"
        self._add = client.register_script(_ADD)
        self._claim = client.register_script(_CLAIM)
        self._requeue = client.register_script(_REQUEUE_OWN)

    @classmethod
    async def connect(cls, url: str, crawl_id: str, instance_id: str) -> CrawlState:
        client = aioredis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=5,
                                         health_check_interval=30)
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            await client.aclose()
            raise RedisUnavailable(f"Redis is not reachable: {type(exc).__name__}") from exc
        return cls(client, crawl_id, instance_id)

    async def close(self) -> None:
        await self.redis.aclose()

    # queue

    async def add(self, entries: list[QueueEntry], limit: int) -> list[int]:
        """Queue entries not seen before, one atomic check each; 0 queued, 1 seen, 2 over limit."""
        if not entries:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for e in entries:
                await self._add(keys=[self.q, self.s], args=[e.url, e.to_json(), e.depth, limit],
                                client=pipe)
            return [int(r) for r in await pipe.execute()]

    async def claim(self, now: str) -> QueueEntry | None:
        raw = await self._claim(keys=[self.q, self.p], args=[self.instance_id, now])
        return QueueEntry.from_json(raw) if raw else None

    async def requeue_own(self) -> int:
        """Put this instance's in-progress pages (left by a crash) back in the queue."""
        return int(await self._requeue(keys=[self.p, self.q], args=[self.instance_id]))

    async def mark_done(self, url: str, page_record: str | None) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            if page_record is not None:
                pipe.lpush(self.pages, page_record)
            pipe.incr(self.d)
            pipe.hdel(self.p, url)
            await pipe.execute()

    async def mark_failed(self, url: str, record: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(self.f, record)
            pipe.hdel(self.p, url)
            await pipe.execute()

    async def is_finished(self) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zcard(self.q)
            pipe.hlen(self.p)
            queued, in_progress = await pipe.execute()
        return queued == 0 and in_progress == 0

    async def done_count(self) -> int:
        return int(await self.redis.get(self.d) or 0)

    async def drop_queued(self, regex) -> int:
        """Remove queued URLs matching `regex`; they count as seen-but-excluded."""
        dropped = 0
        for member in await self.redis.zrange(self.q, 0, -1):
            url = json.loads(member)["url"]
            if regex.search(url) and await self.redis.zrem(self.q, member):
                await self.redis.sadd(self.excluded, url)
                dropped += 1
        return dropped

    async def new_assets(self, urls: list[str]) -> list[str]:
        """The requisites no instance of this crawl has fetched yet (and claims them)."""
        if not urls:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for url in urls:
                pipe.sadd(self.assets, url)
            added = await pipe.execute()
        return [url for url, new in zip(urls, added, strict=True) if new]

    async def add_extra_seed(self, orig_seed_id: int, url: str) -> int:
        """Register a seed's redirect target as a seed of its own; returns its list position."""
        length = await self.redis.rpush(
            self.extra_seeds, json.dumps({"origSeedId": orig_seed_id, "newUrl": url}))
        return length - 1

    async def get_extra_seeds(self) -> list[dict]:
        return [json.loads(raw) for raw in await self.redis.lrange(self.extra_seeds, 0, -1)]

    # instance status and commands

    async def get_status(self) -> str | None:
        return await self.redis.hget(self.status, self.instance_id)

    async def set_status(self, status: str) -> None:
        await self.redis.hset(self.status, self.instance_id, status)

    async def set_size(self, size: int) -> None:
        await self.redis.hset(self.size, self.instance_id, size)

    async def read_commands(self) -> Commands:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.stopping)
            pipe.get(self.paused)
            pipe.get(self.canceled)
            pipe.hget(self.stopone, self.instance_id)
            stopping, paused, canceled, stop_one = await pipe.execute()
        return Commands(stopping=_truthy(stopping), paused=_truthy(paused),
                        canceled=_truthy(canceled), stop_one=_truthy(stop_one))

    async def pop_messages(self) -> list[dict]:
        messages = []
        while (raw := await self.redis.lpop(self.msg)) is not None:
            try:
                messages.append(json.loads(raw))
            except ValueError:
                logger.warning("ignoring a control message that is not JSON: %.200s", raw)
        return messages

    async def push_errors(self, lines: list[str]) -> None:
        if lines:
            await self.redis.rpush(self.errors, *lines)


def _truthy(value: str | None) -> bool:
    return value not in (None, "", "0")

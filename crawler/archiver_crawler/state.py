"""The crawl's shared state in Redis, with the key names of browsertrix-crawler.

Every transition that several instances could race on is one Lua script, so that a URL is
always in exactly one of: the queue `:q`, in progress `:p`, done/failed. "Finished" is
read as one MULTI snapshot of `ZCARD :q` and `HLEN :p`; a page's links are queued by the same
script that removes it from `:p`, so no instance sees an empty queue while work could appear.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError, RedisError

from archiver_crawler.errors import RedisUnavailable

logger = logging.getLogger(__name__)

# KEYS: q, s   ARGV: limit, then (url, entry json, score) triples
# -> per URL: 0 queued, 1 already seen, 2 over the page limit (the seen set never exceeds it)
_ADD = """
local limit = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 3 do
  if redis.call('SISMEMBER', KEYS[2], ARGV[i]) == 1 then
    out[#out + 1] = 1
  elseif limit > 0 and redis.call('SCARD', KEYS[2]) >= limit then
    out[#out + 1] = 2
  else
    redis.call('SADD', KEYS[2], ARGV[i])
    redis.call('ZADD', KEYS[1], ARGV[i + 2], ARGV[i + 1])
    out[#out + 1] = 0
  end
end
return out
"""

# The worker's one call between two pages.
# KEYS: q, s, p, d, f, pages, assets
# ARGV: limit, owner, started ('' = claim nothing), url ('' = no outcome), 'done'|'failed',
#       record ('' = none), links (JSON [[url, seedId, depth, extraHops], ...] or ''),
#       requisites (JSON [url, ...] or '')
# -> {links queued, per requisite 1 new / 0 known, claimed entry or '',
#     1 if the outcome was recorded / 0 if the page was no longer ours}
# Links and requisites travel as one JSON string each: packing a few arguments per link was
# a large part of the client's CPU per page.
# The outcome only counts while `:p` still says this instance holds the page: a page handed
# back (or taken back from a dead owner) and claimed again is counted once, by its new owner.
_COMMIT = """
local limit = tonumber(ARGV[1])
local queued = 0
if ARGV[7] ~= '' then
  for _, link in ipairs(cjson.decode(ARGV[7])) do
    if redis.call('SISMEMBER', KEYS[2], link[1]) == 0
        and (limit <= 0 or redis.call('SCARD', KEYS[2]) < limit) then
      redis.call('SADD', KEYS[2], link[1])
      redis.call('ZADD', KEYS[1], link[3], cjson.encode(
        {url = link[1], seedId = link[2], depth = link[3], extraHops = link[4]}))
      queued = queued + 1
    end
  end
end
local fresh = {}
if ARGV[8] ~= '' then
  for j, url in ipairs(cjson.decode(ARGV[8])) do
    fresh[j] = redis.call('SADD', KEYS[7], url)
  end
end
local recorded = 0
if ARGV[4] ~= '' then
  local held = redis.call('HGET', KEYS[3], ARGV[4])
  if held and cjson.decode(held)['owner'] == ARGV[2] then
    if ARGV[5] == 'failed' then
      redis.call('RPUSH', KEYS[5], ARGV[6])
    else
      if ARGV[6] ~= '' then redis.call('LPUSH', KEYS[6], ARGV[6]) end
      redis.call('INCR', KEYS[4])
    end
    redis.call('HDEL', KEYS[3], ARGV[4])
    recorded = 1
  end
end
local claimed = ''
if ARGV[3] ~= '' then
  local r = redis.call('ZPOPMIN', KEYS[1])
  if #r > 0 then
    local data = cjson.decode(r[1])
    data['owner'] = ARGV[2]
    data['started'] = ARGV[3]
    redis.call('HSET', KEYS[3], data['url'], cjson.encode(data))
    claimed = r[1]
  end
end
return {queued, fresh, claimed, recorded}
"""

# KEYS: p, q   ARGV: owner, '1' to include the owner's processes (`<owner>#...`, see
# procs.py) or '0', URLs to keep  -> number of entries of those owners put back in the queue
# (all but the kept ones)
_REQUEUE_OWN = """
local keep = {}
for i = 3, #ARGV do keep[ARGV[i]] = true end
local prefix = ARGV[1] .. '#'
local all = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #all, 2 do
  local data = cjson.decode(all[i + 1])
  local owner = data['owner'] or ''
  local mine = owner == ARGV[1]
      or (ARGV[2] == '1' and string.sub(owner, 1, #prefix) == prefix)
  if mine and not keep[data['url']] then
    redis.call('HDEL', KEYS[1], all[i])
    data['owner'] = nil
    data['started'] = nil
    redis.call('ZADD', KEYS[2], data['depth'] or 0, cjson.encode(data))
    n = n + 1
  end
end
return n
"""


# KEYS: q, p, status   ARGV: cutoff (a claim time, as iso_now() writes them)
# -> {queued, in progress, requeued}. Only when the queue is empty: pages held by an instance
# whose status says it is gone for good (done, canceled, failed, or no status: scaled down
# and forgotten) and claimed before the cutoff go back to the queue. A live instance sets
# `running` before it claims anything and keeps a non-final status while it holds pages,
# and its commit ignores a page that is no longer its own. A page held by one process of an
# instance (owner `<instance>#<process>`, procs.py) goes by its instance's status.
_SETTLE = """
local queued = redis.call('ZCARD', KEYS[1])
local requeued = 0
if queued == 0 then
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local data = cjson.decode(all[i + 1])
    local owner = data['owner'] and (string.match(data['owner'], '^(.-)#') or data['owner'])
    local status = owner and redis.call('HGET', KEYS[3], owner)
    local gone = not status or status == 'done' or status == 'canceled' or status == 'failed'
    if gone and (data['started'] or '') < ARGV[1] then
      redis.call('HDEL', KEYS[2], all[i])
      data['owner'] = nil
      data['started'] = nil
      redis.call('ZADD', KEYS[1], data['depth'] or 0, cjson.encode(data))
      requeued = requeued + 1
    end
  end
end
return {queued + requeued, redis.call('HLEN', KEYS[2]), requeued}
"""

# Redis must answer every call within these bounds (seconds); a silent server is an error
# (exit 8 and a relaunch), never a hang. redis-py retries the connection and the command
# (once each, nested), so a server that accepts and never answers costs about
# 4 x COMMAND_TIMEOUT; a refused connection costs well under a second.
CONNECT_TIMEOUT = 5
COMMAND_TIMEOUT = 10
HEALTH_CHECK_INTERVAL = 10


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
class Outcome:
    """How a claimed page ended: done (with its page record, if kept in Redis) or failed,
    and what it found: links to queue and requisites to fetch."""

    url: str
    page: str | None = None
    record: str | None = None  # the pages.jsonl line, written once the outcome counted
    failed: str | None = None
    links: tuple[QueueEntry, ...] = ()
    assets: tuple[str, ...] = ()
    owner: str | None = None  # journaled outcomes only: who held the page in `:p`


@dataclass(frozen=True)
class Committed:
    """What the worker's call between two pages returned."""

    queued: int  # links newly queued
    fresh: list[str]  # requisites this instance now has to fetch
    claimed: QueueEntry | None
    recorded: bool  # False: the page was no longer this instance's, its outcome was dropped


@dataclass(frozen=True)
class Settled:
    queued: int
    in_progress: int
    requeued: int

    @property
    def finished(self) -> bool:
        return self.queued == 0 and self.in_progress == 0


@dataclass(frozen=True)
class Commands:
    stopping: bool = False
    paused: bool = False
    canceled: bool = False
    stop_one: bool = False


class CrawlState:
    def __init__(self, client: aioredis.Redis, crawl_id: str, instance_id: str,
                 owner: str | None = None):
        self.redis = client
        self.instance_id = instance_id
        # Who holds the pages this client claims in `:p`: the instance, or one process of
        # it (`<instance>#<process>`, procs.py); status, size and commands stay the instance's.
        self.owner = owner or instance_id
        k = crawl_id
        self.q, self.s, self.p, self.d, self.f = (f"{k}:q", f"{k}:s", f"{k}:p", f"{k}:d", f"{k}:f")
        self.excluded, self.extra_seeds = f"{k}:excluded", f"{k}:extraSeeds"
        self.status, self.size = f"{k}:status", f"{k}:size"
        self.pages, self.errors = f"{k}:pages", f"{k}:e"
        self.stopping, self.paused, self.canceled = f"{k}:stopping", f"{k}:paused", f"{k}:canceled"
        self.stopone, self.assets = f"{k}:stopone", f"{k}:assets"
        self.msg = f"{instance_id}:msg"
        self._shas: dict[str, str] = {}

    async def load_scripts(self) -> None:
        """Load the hot-path scripts once; pipelines then call them by sha with no extra
        SCRIPT EXISTS round trip (what redis-py's Script objects do in a pipeline)."""
        for script in (_ADD, _COMMIT, _SETTLE, _REQUEUE_OWN):
            self._shas[script] = await self.redis.script_load(script)

    def _add_command(self, pipe, calls: list, entries: list[QueueEntry], limit: int) -> None:
        args: list = [limit]
        for e in entries:
            args += [e.url, e.to_json(), e.depth]
        self._evalsha(pipe, calls, _ADD, [self.q, self.s], args)

    def _evalsha(self, pipe, calls: list, script: str, keys: list[str], args: list) -> None:
        calls.append((len(pipe.command_stack), script, keys, args))
        pipe.evalsha(self._shas[script], len(keys), *keys, *args)

    async def _execute(self, pipe, calls: list) -> list:
        results = await pipe.execute(raise_on_error=False)
        for index, script, keys, args in calls:
            if isinstance(results[index], NoScriptError):
                # The server lost its script cache (restart, SCRIPT FLUSH); EVAL reloads it.
                results[index] = await self.redis.eval(script, len(keys), *keys, *args)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    @classmethod
    async def connect(cls, url: str, crawl_id: str, instance_id: str,
                      owner: str | None = None) -> CrawlState:
        client = aioredis.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=COMMAND_TIMEOUT, socket_keepalive=True,
            health_check_interval=HEALTH_CHECK_INTERVAL,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.2), 1))
        try:
            await client.ping()
        except (RedisError, OSError) as exc:
            await client.aclose()
            raise RedisUnavailable(f"Redis is not reachable: {type(exc).__name__}") from exc
        state = cls(client, crawl_id, instance_id, owner)
        await state.load_scripts()
        return state

    async def close(self) -> None:
        await self.redis.aclose()

    # queue

    async def add(self, entries: list[QueueEntry], limit: int,
                  assets: list[str] = ()) -> tuple[list[int], list[str]]:
        """Queue unseen entries (0 queued, 1 seen, 2 over limit, each one atomic check) and
        claim the requisites no instance has fetched yet, in one round trip."""
        if not entries and not assets:
            return [], []
        calls: list = []
        async with self.redis.pipeline(transaction=False) as pipe:
            if entries:
                self._add_command(pipe, calls, entries, limit)
            for url in assets:
                pipe.sadd(self.assets, url)
            results = await self._execute(pipe, calls)
        added = [int(r) for r in results[0]] if entries else []
        fresh = [url for url, new in zip(assets, results[1 if entries else 0:], strict=True)
                 if new]
        return added, fresh

    async def commit(self, outcome: Outcome | None, limit: int, now: str | None,
                     owner: str | None = None) -> Committed:
        """The worker's one call between two pages, one Lua script: queue the last page's
        links, claim its requisites, record its outcome, and (unless `now` is None) claim the
        next page. The links are in `:q` before the page leaves `:p`. `owner`: who holds the
        page in `:p`, when not this client (a journaled outcome of another process)."""
        if outcome is None and now is None:
            return Committed(0, [], None, False)
        args: list = [limit, owner or self.owner, now or ""]
        assets: tuple[str, ...] = ()
        if outcome is None:
            args += ["", "", "", "", ""]
        else:
            if outcome.failed is not None:
                args += [outcome.url, "failed", outcome.failed]
            else:
                args += [outcome.url, "done", outcome.page or ""]
            links, assets = outcome.links, outcome.assets
            args.append(json.dumps([[e.url, e.seed_id, e.depth, e.extra_hops] for e in links])
                        if links else "")
            args.append(json.dumps(assets) if assets else "")
        keys = [self.q, self.s, self.p, self.d, self.f, self.pages, self.assets]
        queued, new_assets, claimed, recorded = await self._script(_COMMIT, keys, args)
        fresh = [url for url, new in zip(assets, new_assets, strict=True) if new]
        return Committed(int(queued), fresh,
                         QueueEntry.from_json(claimed) if claimed else None, bool(recorded))

    async def _script(self, script: str, keys: list[str], args: list):
        try:
            return await self.redis.evalsha(self._shas[script], len(keys), *keys, *args)
        except NoScriptError:
            # The server lost its script cache (restart, SCRIPT FLUSH); EVAL reloads it.
            return await self.redis.eval(script, len(keys), *keys, *args)

    async def requeue_own(self, keep: Iterable[str] = ()) -> int:
        """Put this instance's in-progress pages back in the queue: those a crash left (at
        start), or those it has not finished (at exit); except the `keep` URLs (archived,
        their outcomes journaled for this instance's next session to record). The instance
        itself (not one of its processes) takes back its processes' pages too."""
        whole = "1" if self.owner == self.instance_id else "0"
        return int(await self._script(_REQUEUE_OWN, [self.p, self.q],
                                      [self.owner, whole, *keep]))

    async def requeue_process(self, owner: str, keep: Iterable[str] = ()) -> int:
        """Put the pages of one process of this instance (`owner`) back in the queue: it
        died holding them (procs.py)."""
        return int(await self._script(_REQUEUE_OWN, [self.p, self.q], [owner, "0", *keep]))

    async def settle(self, cutoff: str) -> Settled:
        """Whether the crawl is finished (one atomic read of `:q` and `:p`); with an empty
        queue, pages of instances gone for good, claimed before `cutoff`, are requeued."""
        queued, in_progress, requeued = await self._script(
            _SETTLE, [self.q, self.p, self.status], [cutoff])
        return Settled(int(queued), int(in_progress), int(requeued))

    async def holders(self) -> dict[str, int]:
        """Pages in progress per owning instance (for the log of an idle instance)."""
        counts: dict[str, int] = {}
        for raw in await self.redis.hvals(self.p):
            owner = str(json.loads(raw).get("owner"))
            counts[owner] = counts.get(owner, 0) + 1
        return counts

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

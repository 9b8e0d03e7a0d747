"""One politeness per host for every crawl: a request budget, back-off when asked, a breaker.

The state lives in Redis database 0 of the crawl's server (`shared_url`), which every crawl's
ACL user reaches (a connection starts there and needs no SELECT), under `host:<host>:*`
keys. So every instance, process and crawl of one host, and every runner sharing the Redis
server, draws on the same budget:

- `host:<h>:next`: the Redis clock time (ms) of the next request slot. A request takes the
  slot at max(now, next, pause end) and moves `next` one interval on (the caller's crawl's
  interval: 1/rate, or the host's robots.txt Crawl-delay if longer). One script call per
  request; the clock is Redis's (`TIME`), so instances on other machines agree.
- `host:<h>:pause`: the end (ms) of a pause a 429 or 503 asked for (Retry-After in seconds
  or as an HTTP date, at most MAX_PAUSE; PAUSE_DEFAULT without one). Slots wait for it.
- `host:<h>:fails`, `host:<h>:down`: requests in a row that got no response; at BREAKER_FAILS
  the host is down for BREAKER_OPEN seconds (the reason kept), and every page of it fails at
  once with that reason. After that one more failure trips it again; any response resets it.

A crawl's user can write these keys, so a crawler could slow another crawl's host down, by
at most MAX_PAUSE at a time; it cannot read or change any other data of another crawl.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from archiver_crawler.errors import ConfigError

# Redis (and state.py, which needs it) is imported where a budget connects: config.py imports
# this module for Rates, and every archiver command that reads crawl options would pay 0.35 s
# of CPU for an import it does not use.
if TYPE_CHECKING:
    import redis.asyncio as aioredis

logger = logging.getLogger(__name__)

BACK_OFF_STATUSES = (429, 503)
MAX_RATE = 1000.0  # requests per second to one host: above, a typo rather than a budget
PAUSE_DEFAULT = 10.0  # seconds, for a 429 or 503 without a Retry-After
MAX_PAUSE = 300.0  # a longer Retry-After is cut to this
MAX_RETRIES = 5  # a page asked to wait more often than this keeps the last answer (archived)
MAX_CRAWL_DELAY = 60.0  # robots.txt Crawl-delay above this is read as this
BREAKER_FAILS = 5
BREAKER_OPEN = 300.0
FAILS_MEMORY = 600  # seconds a run of failures is remembered without a new one
KEY_TTL = 3600  # seconds: a host's keys outlive any slot or pause they hold

# KEYS: next, pause, fails, down. ARGV: interval ms. Returns {wait ms, fails, down reason,
# end ms of a pause in force or 0}; `down` non-empty: no slot was taken.
TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local down = redis.call('GET', KEYS[4])
local fails = tonumber(redis.call('GET', KEYS[3]) or '0')
if down then return {0, fails, down, 0} end
local pause = tonumber(redis.call('GET', KEYS[2]) or '0')
local interval = tonumber(ARGV[1])
local slot = math.max(now, pause)
if interval > 0 then
  slot = math.max(slot, tonumber(redis.call('GET', KEYS[1]) or '0'))
  redis.call('SET', KEYS[1], slot + interval, 'PX', slot + interval - now + 60000)
end
if pause <= now then pause = 0 end
return {slot - now, fails, '', pause}
"""
# KEYS: pause. Returns the ms a pause in force still lasts (0: none).
PAUSED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return math.max(0, tonumber(redis.call('GET', KEYS[1]) or '0') - now)
"""
# KEYS: pause. ARGV: seconds (ms). Returns {1 if this call moved the pause end, end ms}.
PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wanted = now + tonumber(ARGV[1])
local pause = tonumber(redis.call('GET', KEYS[1]) or '0')
if pause >= wanted then return {0, pause} end
redis.call('SET', KEYS[1], wanted, 'PX', tonumber(ARGV[1]) + 60000)
return {1, wanted}
"""
# KEYS: fails, down. ARGV: threshold, open s, memory s, reason. Returns 1 if this call tripped.
FAIL = """
local fails = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
if fails >= tonumber(ARGV[1]) and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], ARGV[4], 'EX', tonumber(ARGV[2]))
  redis.call('SET', KEYS[1], tonumber(ARGV[1]) - 1, 'EX', tonumber(ARGV[2]) + tonumber(ARGV[3]))
  return 1
end
return 0
"""

T = TypeVar("T")


class HostDown(Exception):
    """The host's circuit breaker is open: the request was not sent (the message says why).
    Its callers fail the request as one that got no response (fetch.FetchError)."""


@dataclass(frozen=True)
class Rates:
    """Requests per second to one host: `default` (0: no limit), or the first of `patterns`
    (fnmatch on the host name, e.g. `*.example.org`) that matches."""

    default: float = 0.0
    patterns: tuple[tuple[str, float], ...] = ()

    def of(self, host: str) -> float:
        name = host.lower().rsplit(":", 1)[0] if not host.endswith("]") else host.lower()
        for pattern, rate in self.patterns:
            if fnmatchcase(name, pattern.lower()) or fnmatchcase(host.lower(), pattern.lower()):
                return rate
        return self.default


def host_options(o: dict[str, Any]) -> dict[str, Any]:
    """CrawlConfig's `rates` from `--hostRate R` (requests per second to one host; 0, the
    default, sets no limit) and `--hostRates` (`pattern=rate`, comma-separated, or a
    config file's list or mapping): ConfigError for anything else."""
    default = _rate("--hostRate", o.get("hostRate", 0))
    given = o.get("hostRates") or []
    if isinstance(given, dict):
        items = [f"{k}={v}" for k, v in given.items()]
    elif isinstance(given, str):
        items = given.split(",")
    elif isinstance(given, list):
        items = [part for item in given for part in str(item).split(",")]
    else:
        raise ConfigError("--hostRates must be pattern=rate pairs, e.g. *.example.org=0.5")
    patterns = []
    for item in filter(None, (i.strip() for i in items)):
        pattern, equals, rate = item.rpartition("=")
        if not equals or not pattern.strip() or any(c.isspace() for c in pattern.strip()):
            raise ConfigError(f"--hostRates: {item!r} is not pattern=rate, e.g. *.example.org=0.5")
        patterns.append((pattern.strip().lower(), _rate(f"--hostRates {pattern.strip()}", rate)))
    return {"rates": Rates(default, tuple(patterns))}


def _rate(name: str, value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number of requests per second, not {value!r}") from None
    if not 0 <= rate <= MAX_RATE:
        raise ConfigError(f"{name} must be between 0 (no limit) and {MAX_RATE:g} requests per second")
    return rate


def shared_url(url: str) -> str:
    """The crawl's Redis URL with database 0: the key space every crawl shares."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("db="))
        # Written out: urlunsplit drops the empty authority, leaving `unix:/path`.
        return f"unix://{parts.netloc}{parts.path}?" + "&".join(filter(None, [query, "db=0"]))
    return urlunsplit(parts._replace(path="/0"))


def retry_after(value: str | None, now: float | None = None) -> float:
    """Seconds a Retry-After asks for (delta-seconds or an HTTP date), within 0..MAX_PAUSE;
    PAUSE_DEFAULT when absent or unreadable."""
    if value is None or not value.strip():
        return PAUSE_DEFAULT
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_PAUSE)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return PAUSE_DEFAULT
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now is None else now
    return max(0.0, min(when.timestamp() - now, MAX_PAUSE))


class HostBudget:
    """The shared budget as one crawl process sees it. `polite()` wraps each request."""

    def __init__(self, client: aioredis.Redis, rates: Rates,
                 crawl: tuple[aioredis.Redis, str] | None = None):
        self.client = client
        self.rates = rates
        # The crawl's own Redis and id: where its processes agree on who says a pause.
        self.crawl = crawl
        self._take = client.register_script(TAKE)
        self._pause = client.register_script(PAUSE)
        self._fail = client.register_script(FAIL)
        self._paused = client.register_script(PAUSED)
        self._crawl_delays: dict[str, float] = {}
        self._said: set[tuple[str, int]] = set()  # pauses this process has logged

    @classmethod
    def connect(cls, crawl_redis_url: str, rates: Rates,
                crawl: tuple[aioredis.Redis, str] | None = None) -> HostBudget:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import ExponentialBackoff

        from archiver_crawler import state

        # As the crawl's own connection is made (state.py): a blip is retried the same way.
        client = aioredis.Redis.from_url(
            shared_url(crawl_redis_url), decode_responses=True,
            socket_connect_timeout=state.CONNECT_TIMEOUT, socket_timeout=state.COMMAND_TIMEOUT,
            socket_keepalive=True, health_check_interval=state.HEALTH_CHECK_INTERVAL,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.2), 1))
        return cls(client, rates, crawl)

    async def close(self) -> None:
        await self.client.aclose()

    def crawl_delay(self, host: str, seconds: float | None) -> None:
        """robots.txt's Crawl-delay for `host`: it tightens the rate, never loosens it."""
        if seconds:
            self._crawl_delays[host] = min(float(seconds), MAX_CRAWL_DELAY)

    def interval_ms(self, host: str) -> int:
        rate = self.rates.of(host)
        interval = 1000.0 / rate if rate > 0 else 0.0
        return int(max(interval, self._crawl_delays.get(host, 0.0) * 1000))

    async def polite(self, host: str, send: Callable[[], Awaitable[T]],
                     answer: Callable[[T], tuple[int, str | None]],
                     unanswered: Callable[[Exception], bool]) -> T:
        """`send()` once the host's budget gives a slot. `answer(result)` is its status and
        Retry-After: a 429 or 503 pauses the host (for every crawl) and sends again after
        the pause, at most MAX_RETRIES times. An exception `unanswered` says got no response
        counts towards the host's breaker. HostDown when the breaker is open."""
        for attempt in range(MAX_RETRIES + 1):
            fails = await self._wait(host)
            try:
                result = await send()
            except Exception as exc:
                if unanswered(exc):
                    await self._failed(host, str(exc))
                raise
            if fails:
                await self.client.delete(self._key(host, "fails"))
            code, asked = answer(result)
            if code not in BACK_OFF_STATUSES or attempt == MAX_RETRIES:
                return result
            await self.pause(host, code, retry_after(asked))
        raise AssertionError("unreachable")

    async def pause(self, host: str, code: int, seconds: float) -> None:
        moved, end = await self._pause(keys=[self._key(host, "pause")],
                                       args=[int(seconds * 1000)])
        if moved:
            await self._say_paused(host, int(end), f"it answered {code}; every crawl's "
                                   f"requests to it wait {seconds:g} s, and the page is "
                                   "fetched again")

    async def _wait(self, host: str) -> int:
        """Until this request's slot; the failures in a row the host had (0 mostly)."""
        while True:
            wait, fails, down, pause = await self._take(
                keys=[self._key(host, k) for k in ("next", "pause", "fails", "down")],
                args=[self.interval_ms(host)])
            if down:
                raise HostDown(down)
            if int(pause) and int(wait) > 0:
                await self._say_paused(host, int(pause), "another request to it was answered "
                                       "429 or 503; waiting for the end of the pause")
            if int(wait) <= 0:
                return int(fails)
            await asyncio.sleep(int(wait) / 1000)
            if not await self._paused(keys=[self._key(host, "pause")]):
                return int(fails)
            # A pause began while this request waited for its slot: a new slot after it.

    async def _failed(self, host: str, reason: str) -> None:
        said = (f"host {host} is down: {BREAKER_FAILS} requests in a row got no response, "
                f"its pages fail for {BREAKER_OPEN:g} s (last: {reason})")[:400]
        tripped = await self._fail(keys=[self._key(host, "fails"), self._key(host, "down")],
                                   args=[BREAKER_FAILS, int(BREAKER_OPEN), FAILS_MEMORY, said])
        if tripped:
            logger.error("%s", said, extra={"context": "hostBudget",
                                            "details": {"host": host, "reason": reason}})

    async def _say_paused(self, host: str, end_ms: int, why: str) -> None:
        """Once per pause and crawl, whichever of its processes sees it first."""
        if (host, end_ms) in self._said:
            return
        self._said.add((host, end_ms))
        if self.crawl is not None:
            client, crawl_id = self.crawl
            if not await client.set(f"{crawl_id}:hostPauseSaid:{host.lower()}:{end_ms}", 1,
                                    nx=True, ex=int(MAX_PAUSE) + 60):
                return
        until = datetime.fromtimestamp(end_ms / 1000, UTC).strftime("%H:%M:%S")
        logger.warning("host %s is paused until %s UTC: %s", host, until, why,
                       extra={"context": "hostBudget", "crawl_log": True,
                              "details": {"host": host, "until": until}})

    @staticmethod
    def _key(host: str, what: str) -> str:
        return f"host:{host.lower()}:{what}"


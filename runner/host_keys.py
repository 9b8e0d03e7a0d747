"""Database 0 of the embedded Redis: the crawls' shared host budget, and nothing else.

Every connection starts in database 0 and no ACL rule can close it to a crawl's user, so
what a crawler writes there escapes its database's budget. The one thing crawlers are meant
to keep there is the budget per host every crawl shares (the crawler's hosts.py:
`host:<host>:next|pause|fails|down`, short strings that expire). The watch keeps those and
drops every other key, any of those that is not a short expiring string, and all of them
once there are more than MAX_KEYS (the budget then starts again from nothing: politeness
is lost for a moment, memory never).
"""

from __future__ import annotations

import redis

MAX_KEYS = 10_000  # hosts crawled within the last minute or so, four keys at most each
MAX_VALUE = 512  # bytes: a time in ms, a count, or a breaker's reason (400 characters)

# ARGV: MAX_VALUE. Returns how many keys were dropped.
_SWEEP = """
local kinds = {next = true, pause = true, fails = true, down = true}
local dropped = 0
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local kind = string.match(key, '^host:.+:(%a+)$')
    local keep = kind ~= nil and kinds[kind] ~= nil
      and redis.call('TYPE', key)['ok'] == 'string'
      and redis.call('STRLEN', key) <= tonumber(ARGV[1])
      and redis.call('TTL', key) > 0
    if not keep then
      redis.call('UNLINK', key)
      dropped = dropped + 1
    end
  end
until cursor == '0'
return dropped
"""


def sweep(client: redis.Redis) -> int:
    """Drop from database 0 (`client`'s) what is not the host budget's; how many keys went."""
    size = client.dbsize()
    if not size:
        return 0
    if size > MAX_KEYS:
        client.flushdb(asynchronous=True)
        return size
    return int(client.eval(_SWEEP, 0, MAX_VALUE))

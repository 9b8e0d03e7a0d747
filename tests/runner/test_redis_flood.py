"""A crawler that fills the shared Redis faster than the runner measures (issue 36: 1 GB in
11 s). Redis has no memory limit per ACL user, so between two measures such a crawler can
bring the server to its `maxmemory`; this file pins down, against a real redis-server, what
then holds and what does not (docs/security.md, "Redis: one identity per crawl"):

- held: nothing another crawl wrote is evicted (noeviction), the runner's own tick still
  measures and cuts the culprit off (ACL user off, connections killed, keys dropped) at the
  first tick, and the other crawl then completes with every page;
- not held: until that tick, the other crawl's writes are refused (its crawler would exit
  and be launched again)."""

from __future__ import annotations

import json
import socket

import pytest
import redis

from crawls.models import CrawlStatus
from tests.runner.step_helpers import end_instance, later
from tests.runner.test_redis_budget import MiB, admin, assert_cut_off, embedded, own_client  # noqa: F401
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db
PAGES = 20


def page(crawl, i: int) -> str:
    return json.dumps({"url": f"http://site/{i}", "title": "t", "status": 200})


def flood(client: redis.Redis, key: str, limit: int) -> int:
    """Write 64 KiB values, pipelined, then smaller ones (what a pipeline's buffers held is
    given back after it), until the server refuses them: the bytes it took."""
    taken = 0
    for size in (64 << 10, 1 << 10):
        while True:
            pipe = client.pipeline(transaction=False)
            for _ in range(16):
                pipe.rpush(key, b"x" * size)
            try:
                pipe.execute()
            except redis.ResponseError as exc:
                assert "maxmemory" in str(exc)
                break
            taken += 16 * size
            assert taken < limit, f"the server took {taken} bytes and refused none"
    while True:  # one small value at a time: the last one taken leaves the server over the line
        try:
            client.rpush(key, b"x" * 64)
        except redis.ResponseError as exc:
            assert "maxmemory" in str(exc)
            return taken
        taken += 64


def test_a_crawler_reaching_maxmemory_between_two_measures_is_cut_off_at_the_next_and_another_crawl_completes(
        make_runner, make_crawl, fake, settings, admin):  # noqa: F811
    hostile, other = make_crawl(), make_crawl()
    runner = make_runner(fake, settings=settings.model_copy(update={"crawl_redis_max_bytes": 2 * MiB}),
                         store=admin)
    runner.tick(later(0))
    crawler, neighbour = own_client(admin, hostile), own_client(admin, other)
    db = hostile.redis_db
    for i in range(PAGES // 2):
        neighbour.lpush(f"{other.pk}:pages", page(other, i))
    neighbour.set(f"{other.pk}:d", PAGES // 2)

    # Before any measure, the crawler takes the whole server (32 MiB, its budget 2 MiB) ...
    assert flood(crawler, f"{hostile.pk}:junk", 64 * MiB) > 16 * MiB
    # ... and until the runner's next tick the other crawl's writes are refused: not held.
    with pytest.raises(redis.ResponseError, match="maxmemory"):
        neighbour.lpush(f"{other.pk}:pages", page(other, PAGES // 2))
    assert neighbour.llen(f"{other.pk}:pages") == PAGES // 2  # nothing of it evicted

    runner.tick(later(1))  # the tick works on a full server: the culprit is cut off
    assert_cut_off(admin, hostile, crawler, db)

    for i in range(PAGES // 2, PAGES):  # its crawler, launched again, writes the rest
        neighbour.lpush(f"{other.pk}:pages", page(other, i))
    neighbour.set(f"{other.pk}:d", PAGES)
    runner.tick(later(2))
    end_instance(fake, admin, other, 0, "done")
    runner.tick(later(3))
    other.refresh_from_db()
    assert (other.status, other.pages_done, other.snapshots.count()) == (CrawlStatus.COMPLETE, PAGES, PAGES)
    crawler.close()
    neighbour.close()


def test_a_refused_write_cannot_take_the_server_past_its_limit_while_it_is_read(admin, embedded):  # noqa: F811
    """maxmemory refuses a write only once its command is read: one SET of 200 MB took a
    32 MiB server to 224 MiB. The embedded server now bounds a value (16 MiB) and a client's
    unread query (32 MiB)."""
    crawler = redis.Redis.from_url(admin.grant(5, "c1").url(5), socket_timeout=10)
    with pytest.raises((redis.ResponseError, redis.ConnectionError)):
        crawler.set("c1:big", b"x" * (200 * MiB))
    crawler.close()
    server = admin.client(0)
    assert server.info("memory")["used_memory_peak"] < 2 * 32 * MiB
    limits = {name: server.config_get(name)[name] for name in ("proto-max-bulk-len", "client-query-buffer-limit")}
    assert limits == {"proto-max-bulk-len": str(16 * MiB), "client-query-buffer-limit": str(32 * MiB)}


def test_many_connections_announcing_large_values_are_dropped_before_they_fill_the_server(admin, embedded):  # noqa: F811
    """Redis makes room for a value as soon as its length is announced, so a crawler's many
    connections (4,096 files each) could each hold 16 MiB without sending it: 12 of them held
    192 MiB of a 32 MiB server. All clients' buffers are bounded (`maxmemory-clients`, a
    quarter of maxmemory): the connections that hold the most are dropped; the runner's own
    are exempt (CLIENT NO-EVICT)."""
    own = admin.grant(5, "c1")
    runner = admin.client(5)
    sockets = []
    try:
        for _ in range(12):  # 12 x 15 MiB announced, a 32 MiB server
            sock = socket.create_connection((own.host, own.port), timeout=10)
            sock.sendall(resp("AUTH", own.username, own.password) + resp("SELECT", "5"))
            assert sock.recv(100) == b"+OK\r\n+OK\r\n"
            sock.sendall(f"*3\r\n$3\r\nSET\r\n$6\r\nc1:big\r\n${15 * MiB}\r\n".encode() + b"x" * 4096)
            sockets.append(sock)
            runner.ping()  # the runner's connection is never the one dropped
        wait_for(lambda: dropped(sockets) >= 8, what="the announcing connections dropped")
        assert admin.client(0).info("memory")["used_memory"] < 32 * MiB
        runner.set("c1:d", 7)
        assert runner.get("c1:d") == "7"
    finally:
        for sock in sockets:
            sock.close()


def resp(*words: str) -> bytes:
    return f"*{len(words)}\r\n".encode() + b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words)


def dropped(sockets: list[socket.socket]) -> int:
    """How many of them the server closed."""
    count = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            count += sock.recv(100) == b""
        except BlockingIOError:
            pass
        except OSError:
            count += 1
        finally:
            sock.setblocking(True)
    return count

"""Per-crawl Redis identities against a real redis-server: a granted crawl user reaches its
own database and nothing else, revoke() cuts it off, a restart's lost users are granted
again, and archiver's own crawler crawls with one."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import signal

import pytest
import redis
from archiver_crawler.cli import run_instance
from archiver_crawler.config import parse_args

from runner.progress import ProgressStore, crawl_password
from runner.redis_server import RedisEndpoint, RedisWatch
from tests.sitegen import serve_site

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
OWN, OTHER = 5, 6


@pytest.fixture
def admin(embedded):
    store = ProgressStore(embedded.ensure())
    yield store
    store.close()


@pytest.fixture
def connect():
    clients = []

    def make(endpoint: RedisEndpoint, db: int = OWN) -> redis.Redis:
        client = redis.Redis.from_url(endpoint.url(db), decode_responses=True, socket_timeout=5)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def refused(call) -> str:
    with pytest.raises(redis.ResponseError) as raised:
        call()
    return str(raised.value)


def test_a_crawl_user_uses_its_own_database_like_a_crawler_does(admin, connect):
    crawler = connect(admin.grant(OWN, "a1"))

    crawler.set("a1:d", 0)
    crawler.incr("a1:d")
    crawler.expire("a1:status:failcount:x", 60)
    crawler.zadd("a1:q", {"entry": 0})
    crawler.hset("a1:status", "crawl-a1-0", "running")
    crawler.lpush("a1:pages", json.dumps({"id": "p1"}))
    crawler.sadd("s:writedupe", "x")  # the real crawler's keys without a crawl-id prefix
    sha = crawler.script_load("return redis.call('zpopmin', KEYS[1])")
    assert crawler.evalsha(sha, 1, "a1:q") == ["entry", "0"]
    assert crawler.eval("return redis.call('incr', KEYS[1])", 1, "a1:d") == 2
    with crawler.pipeline(transaction=True) as pipe:
        pipe.zcard("a1:q").hlen("a1:p")
        assert pipe.execute() == [0, 0]

    assert admin.read(OWN, "a1").done == 2
    assert admin.statuses(OWN, "a1") == {"crawl-a1-0": "running"}


@pytest.mark.parametrize("command", [
    ("SELECT", OTHER), ("SELECT", "0" + str(OWN)), ("FLUSHALL",), ("FLUSHDB",),
    ("CONFIG", "SET", "dir", "/tmp"), ("CONFIG", "GET", "requirepass"), ("SHUTDOWN", "NOSAVE"),
    ("REPLICAOF", "127.0.0.1", "1"), ("SLAVEOF", "127.0.0.1", "1"), ("ACL", "LIST"),
    ("ACL", "SETUSER", "crawl-a1", "+@all"), ("SWAPDB", OWN, OTHER), ("MOVE", "k", OTHER),
    ("COPY", "k", "k2", "DB", OTHER), ("MIGRATE", "127.0.0.1", "1", "k", 0, 1000),
    ("DEBUG", "SLEEP", 0), ("MONITOR",), ("CLIENT", "KILL", "USER", "default"),
    ("CLIENT", "LIST"), ("KEYS", "*"), ("INFO",), ("FUNCTION", "FLUSH"), ("SCRIPT", "FLUSH"),
    ("BGSAVE",), ("PUBLISH", "channel", "x"),
])
def test_a_crawl_user_may_not_run_what_reaches_beyond_its_database(admin, connect, command):
    crawler = connect(admin.grant(OWN, "a1"))
    crawler.set("k", "v")

    message = refused(lambda: crawler.execute_command(*command))

    # DEBUG is also off server-wide; ACL DRYRUN shows the user's own rules refuse each one.
    assert "no permissions" in message or command[0] == "DEBUG", message
    verdict = admin.client(0).execute_command("ACL", "DRYRUN", "crawl-a1", *command)
    assert "no permissions" in verdict, verdict
    assert admin.client(OWN).get("k") == "v"


def test_select_inside_a_script_is_refused_too(admin, connect):
    admin.client(OTHER).set("b1:d", "3")
    crawler = connect(admin.grant(OWN, "a1"))

    message = refused(lambda: crawler.eval("redis.call('select', 6); return redis.call('get', 'b1:d')", 0))

    assert "can't run this command" in message or "NOPERM" in message
    assert admin.client(OTHER).get("b1:d") == "3"


def test_another_crawls_database_is_out_of_reach(admin, connect):
    a = connect(admin.grant(OWN, "a1"))
    b_endpoint = admin.grant(OTHER, "b1")
    admin.client(OTHER).set("b1:canceled", "0")

    refused(lambda: a.execute_command("SELECT", OTHER))
    assert a.get("b1:canceled") is None  # its own database has no such key
    with pytest.raises(redis.AuthenticationError):  # b's password is not a's
        connect(RedisEndpoint(**{**b_endpoint.__dict__, "username": "crawl-a1"})).ping()
    assert b_endpoint.password == crawl_password(admin.endpoint.password, "b1")
    assert b_endpoint.password != admin.endpoint.password


def test_grant_is_idempotent_and_its_password_derived(admin, connect):
    first = admin.grant(OWN, "a1")
    crawler = connect(first)
    crawler.ping()

    again = admin.grant(OWN, "a1")

    assert again == first and again.username == "crawl-a1"
    assert crawler.ping()  # a reset user keeps its connected clients
    assert connect(again).set("a1:d", 1)


def test_revoke_disconnects_the_crawl_and_its_password_stops_working(admin, connect):
    endpoint = admin.grant(OWN, "a1")
    crawler = connect(endpoint)
    crawler.ping()

    admin.revoke("a1")

    users = [c.get("user") for c in admin.client(0).client_list()]
    assert "crawl-a1" not in users
    with pytest.raises(redis.ConnectionError):  # reconnecting fails to log in
        crawler.ping()
    admin.revoke("a1")  # twice is fine


def test_a_restarted_redis_gets_its_crawl_users_again(admin, embedded, connect):
    endpoint = admin.grant(OWN, "a1")
    watch = RedisWatch(embedded, admin.endpoint)
    watch.check(T0)
    os.kill(embedded.process.pid, signal.SIGKILL)
    embedded.process.wait(timeout=10)

    back = watch.check(T0 + dt.timedelta(seconds=2))
    assert back is not None
    admin.reconnect(back)

    assert connect(endpoint).ping()  # the crawler's credentials work again


def test_a_server_without_a_password_cannot_isolate_and_says_so_once(endpoint, caplog):
    store = ProgressStore(endpoint)  # the suite's shared server has no password
    try:
        with caplog.at_level(logging.WARNING, logger="runner.progress"):
            assert store.grant(OWN, "a1") == endpoint
            assert store.grant(OTHER, "b1") == endpoint
            store.revoke("a1")
    finally:
        store.close()
    assert len(caplog.records) == 1
    assert "crawls share one identity" in caplog.records[0].getMessage()


def test_an_admin_without_acl_permission_falls_back_to_the_shared_identity(admin, caplog):
    admin.client(0).execute_command("ACL", "SETUSER", "limited", "on", ">limited-pw", "~*",
                                    "+@all", "-acl")
    limited = RedisEndpoint(host=admin.endpoint.host, port=admin.endpoint.port,
                            username="limited", password="limited-pw")
    store = ProgressStore(limited)
    try:
        with caplog.at_level(logging.WARNING, logger="runner.progress"):
            assert store.grant(OWN, "a1") == limited
            assert store.grant(OWN, "a2") == limited
    finally:
        store.close()
    assert len(caplog.records) == 1
    assert "refuses ACL SETUSER (this user has no permissions" in caplog.records[0].getMessage()
    assert "limited-pw" not in caplog.text


def test_a_crawl_id_is_checked_before_it_becomes_a_user_name(admin):
    with pytest.raises(ValueError):
        admin.grant(OWN, "a1 on nopass")


def test_archivers_crawler_crawls_with_a_granted_endpoint(admin, tmp_path):
    endpoint = admin.grant(OWN, "a1")
    with serve_site() as site:
        config = parse_args(
            ["--url", site.url, "--redisStoreUrl", endpoint.url(OWN), "--crawlId", "a1",
             "--collection", "coll", "--cwd", str(tmp_path), "--pageLoadTimeout", "5",
             "--diskUtilization", "0", "--limit", "5", "--generateWACZ",
             "--allowNetworks", "127.0.0.0/8"],
            env={"CRAWLER_HOSTNAME": "crawl-a1-0"})
        code = asyncio.run(run_instance(config))

    assert code == 0
    progress = admin.read(OWN, "a1")
    assert progress.done >= 1 and progress.statuses == {"crawl-a1-0": "done"}
    assert (tmp_path / "collections" / "coll" / "coll.wacz").exists()

"""The embedded Redis is kept alive and re-read by RedisWatch, against real redis-server
processes: killed while idle it comes back, on a new port when its old one is taken (and
the store reconnects to the data it held), a wedged one is replaced, and an external server
is only watched."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import socket
import stat
from pathlib import Path

from runner.progress import ProgressStore
from runner.redis_server import EmbeddedRedis, RedisEndpoint, RedisWatch, answers
from tests.private_redis import start_redis
from tests.waiting import wait_for

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def later(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill(embedded: EmbeddedRedis) -> int:
    pid = json.loads(embedded.state_file.read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    embedded.process.wait(timeout=10)
    return pid


def written_to_disk(embedded: EmbeddedRedis, store: ProgressStore, db: int) -> None:
    """Keys written before a kill -9 survive once redis-server has written them to its append-only
    file (the kernel keeps what it wrote): wait for a probe written after them to be there."""
    store.client(db).set("probe", "1")
    wait_for(lambda: any(b"probe" in path.read_bytes() for path in embedded.dir.rglob("*.aof")),
             what="the probe in the append-only file")


def test_the_watch_restarts_an_embedded_redis_killed_while_idle(embedded):
    endpoint = embedded.ensure()
    watch = RedisWatch(embedded, endpoint)
    assert watch.check(T0) is None  # first look: it answers

    kill(embedded)
    assert watch.check(later(1)) is None  # at most one ping every 2 s
    assert not answers(endpoint, timeout=0.5)

    # Same port and password, but a new server: ACL users are gone, so the daemon hears of it.
    assert watch.check(later(2)) == endpoint
    assert answers(endpoint, timeout=10)  # a generous reply time: it is up, however busy the machine
    assert watch.up
    assert watch.check(later(4)) is None  # nothing new since


def test_an_embedded_redis_whose_port_was_taken_comes_back_on_a_new_port(embedded):
    endpoint = embedded.ensure()
    watch = RedisWatch(embedded, endpoint)
    watch.check(T0)
    store = ProgressStore(endpoint)
    try:
        store.client(3).set("c1:d", "7")
        written_to_disk(embedded, store, 3)
        kill(embedded)
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", endpoint.port))
            squatter.listen()

            moved = watch.check(later(2))

            assert moved is not None and moved.port != endpoint.port
            assert moved.password == endpoint.password
            store.reconnect(moved)
            assert store.read(3, "c1").done == 7  # the AOF brought it back
    finally:
        store.close()
    assert json.loads(embedded.state_file.read_text())["port"] == moved.port


def test_the_embedded_redis_files_stay_private_after_a_restart(embedded, settings):
    endpoint = embedded.ensure()
    watch = RedisWatch(embedded, endpoint)
    watch.check(T0)
    kill(embedded)
    watch.check(later(2))

    for path in [embedded.state_file, embedded.dir / "redis.conf", *embedded.dir.rglob("*.aof")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(embedded.dir.stat().st_mode) == 0o700
    assert endpoint.password not in " ".join(Path(f"/proc/{embedded.process.pid}/cmdline")
                                             .read_text().split("\0"))


def test_a_wedged_embedded_redis_is_replaced(embedded):
    endpoint = embedded.ensure()
    watch = RedisWatch(embedded, endpoint)
    watch.check(T0)
    store = ProgressStore(endpoint)
    try:
        store.client(2).set("c2:d", "4")
        written_to_disk(embedded, store, 2)
        wedged = embedded.process.pid
        os.kill(wedged, signal.SIGSTOP)

        replaced = watch.check(later(2))
        # Its own port when the kernel has released it, else a free one (both are right).
        assert replaced is not None and replaced.password == endpoint.password

        assert not alive(wedged)  # never two servers on one append-only file
        store.reconnect(replaced)
        assert store.read(2, "c2").done == 4
    finally:
        store.close()


def test_an_embedded_redis_that_will_not_start_is_retried_with_a_backoff(embedded, monkeypatch, caplog):
    endpoint = embedded.ensure()
    watch = RedisWatch(embedded, endpoint)
    watch.check(T0)
    kill(embedded)
    monkeypatch.setenv("PATH", "/nonexistent")  # no redis-server to start

    with caplog.at_level(logging.WARNING, logger="runner.redis_server"):
        assert watch.check(later(2)) is None
        assert watch.check(later(5)) is None  # backing off: not tried again yet
    assert not watch.up
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "the embedded Redis is down and does not start again (redis-server is not on PATH: "
        "install it or set ARCHIVER_REDIS_URL); trying again every 60 s at most"]

    monkeypatch.undo()
    assert watch.check(later(6)) == endpoint
    assert watch.up


def test_an_external_redis_is_only_watched(tmp_path, caplog):
    server = start_redis(tmp_path)
    endpoint = RedisEndpoint(host="127.0.0.1", port=server.port)
    watch = RedisWatch(None, endpoint)
    try:
        assert watch.check(T0) is None and watch.up
        server.process.kill()
        server.process.wait(timeout=10)

        with caplog.at_level(logging.WARNING, logger="runner.redis_server"):
            assert watch.check(later(2)) is None
            assert watch.check(later(4)) is None
        assert not watch.up
        assert len(caplog.records) == 1  # said once, not at every check
        assert not answers(endpoint, timeout=0.2)  # nobody started it

        server = start_redis(tmp_path, port=server.port)
        assert watch.check(later(6)) == endpoint  # a new server: the daemon grants again
        assert watch.up
    finally:
        server.process.kill()
        server.process.wait(timeout=10)

"""Reading a crawl's progress from a real Redis: corrupt data is a readable ProgressCorrupt
naming the key, popped lines are never lost to it, and an unreachable server stays a
connection error."""

from __future__ import annotations

import json
import logging

import pytest
import redis

from archiver.errors import ArchiverError, ProgressCorrupt
from runner.progress import ProgressStore
from runner.redis_server import RedisEndpoint, free_port

DB = 7
CRAWL = "c0ffee"


@pytest.fixture
def r(store):
    return store.client(DB)


def page(n: int) -> str:
    return json.dumps({"id": f"p{n}", "url": f"http://127.0.0.1/{n}"})


def test_progress_is_read_from_the_crawl_keys(store, r):
    r.set(f"{CRAWL}:d", "2")
    r.sadd(f"{CRAWL}:s", "a", "b", "c")
    r.hset(f"{CRAWL}:size", mapping={"crawl-c0ffee-0": "100", "crawl-c0ffee-1": "20"})
    r.hset(f"{CRAWL}:status", "crawl-c0ffee-0", "running")
    r.lpush(f"{CRAWL}:pages", page(1), page(2))

    progress = store.read(DB, CRAWL)

    assert (progress.done, progress.found, progress.size) == (2, 3, 120)
    assert progress.statuses == {"crawl-c0ffee-0": "running"}
    assert [p["id"] for p in progress.pages] == ["p1", "p2"]  # oldest first


def test_pages_read_stay_in_redis_until_let_go_so_a_reader_killed_before_storing_loses_none(store, r):
    r.lpush(f"{CRAWL}:pages", page(1), page(2), page(3))

    first = store.read(DB, CRAWL, batch=2)  # a runner killed -9 after this read stored nothing
    again = store.read(DB, CRAWL, batch=2)  # the next reader (its restart, or the adopter)

    assert [p["id"] for p in first.pages] == [p["id"] for p in again.pages] == ["p1", "p2"]
    r.lpush(f"{CRAWL}:pages", page(4))  # a crawler reports meanwhile, at the head
    store.let_go(DB, CRAWL, again.pages_taken)
    assert [json.loads(line)["id"] for line in r.lrange(f"{CRAWL}:pages", 0, -1)] == ["p4", "p3"]
    pages, _errors, taken = store.drain(DB, CRAWL)
    assert ([p["id"] for p in pages], taken) == (["p3", "p4"], 2)
    store.let_go(DB, CRAWL, taken)
    assert r.llen(f"{CRAWL}:pages") == 0


def test_a_counter_that_is_not_a_number_names_the_key_and_its_value(store, r):
    r.set(f"{CRAWL}:d", "abc")

    with pytest.raises(ProgressCorrupt) as raised:
        store.read(DB, CRAWL)

    assert str(raised.value) == f"Redis key {CRAWL}:d holds 'abc', not a page count"
    assert isinstance(raised.value, ArchiverError) and raised.value.key == f"{CRAWL}:d"


@pytest.mark.parametrize("value", ["-3", "1.5", "²", "x" * 500])
def test_a_counter_is_a_plain_non_negative_integer(store, r, value):
    r.set(f"{CRAWL}:d", value)

    with pytest.raises(ProgressCorrupt, match="not a page count") as raised:
        store.read(DB, CRAWL)

    assert len(str(raised.value)) < 120  # a huge value is cut short in the message


def test_a_key_of_the_wrong_type_is_corrupt_data_not_an_unreachable_redis(store, r):
    r.set(f"{CRAWL}:status", "running")

    with pytest.raises(ProgressCorrupt) as raised:
        store.read(DB, CRAWL)
    assert str(raised.value) == f"Redis key {CRAWL}:status has the wrong type (string, expected hash)"

    with pytest.raises(ProgressCorrupt, match="wrong type"):
        store.statuses(DB, CRAWL)


def test_commands_to_a_key_of_the_wrong_type_are_corrupt_data_too(store, r):
    r.set(f"{CRAWL}:size", "big")
    r.set(f"{CRAWL}:status", "running")
    r.set(f"{CRAWL}:stopone", "x")

    with pytest.raises(ProgressCorrupt, match=r":size has the wrong type \(string, expected hash\)"):
        store.set_size(DB, CRAWL, "crawl-c0ffee-0", 10)
    with pytest.raises(ProgressCorrupt, match=r":stopone has the wrong type"):
        store.stop_one(DB, CRAWL, "crawl-c0ffee-0")
    with pytest.raises(ProgressCorrupt, match=r":stopone has the wrong type"):
        store.forget_instance(DB, CRAWL, "crawl-c0ffee-0")


def test_a_size_that_is_not_a_number_names_the_instance(store, r):
    r.hset(f"{CRAWL}:size", "crawl-c0ffee-0", "lots")

    with pytest.raises(ProgressCorrupt) as raised:
        store.size(DB, CRAWL)

    assert str(raised.value) == (f"Redis key {CRAWL}:size field 'crawl-c0ffee-0' holds 'lots', "
                                 "not a byte count")


def test_pages_popped_in_a_corrupt_reading_are_put_back_in_their_order(store, r):
    r.lpush(f"{CRAWL}:pages", page(1), page(2), page(3))
    r.lpush(f"{CRAWL}:e", json.dumps({"msg": "e1"}))
    r.set(f"{CRAWL}:d", "abc")

    with pytest.raises(ProgressCorrupt):
        store.read(DB, CRAWL)

    r.set(f"{CRAWL}:d", "3")
    progress = store.read(DB, CRAWL)
    assert [p["id"] for p in progress.pages] == ["p1", "p2", "p3"]
    assert progress.errors == [{"msg": "e1"}]


def test_drain_reports_a_pages_key_of_the_wrong_type_and_keeps_the_errors(store, r):
    r.hset(f"{CRAWL}:pages", "x", "1")
    r.lpush(f"{CRAWL}:e", json.dumps({"msg": "e1"}))

    with pytest.raises(ProgressCorrupt, match=r":pages has the wrong type \(hash, expected list\)"):
        store.drain(DB, CRAWL)

    assert r.lrange(f"{CRAWL}:e", 0, -1) == [json.dumps({"msg": "e1"})]


def test_lines_that_are_not_json_objects_are_skipped_with_one_warning(store, r, caplog):
    r.lpush(f"{CRAWL}:pages", page(1), "not json", "[1, 2]", "{broken", page(2))

    with caplog.at_level(logging.WARNING, logger="runner.progress"):
        progress = store.read(DB, CRAWL)

    assert [p["id"] for p in progress.pages] == ["p1", "p2"]
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "skipped 3 page line(s)" in warnings[0].getMessage()


def test_an_unreachable_redis_is_still_a_connection_error():
    store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=free_port()))
    try:
        with pytest.raises(redis.ConnectionError):
            store.read(DB, CRAWL)
        with pytest.raises(redis.ConnectionError):
            store.statuses(DB, CRAWL)
    finally:
        store.close()

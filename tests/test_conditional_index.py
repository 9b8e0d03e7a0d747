"""The index behind conditional recrawls: a kept WACZ's validators (ETag, Last-Modified) are
recorded with its payloads, handed to the next crawler per URL (the newest kept record of a
URL), and an archive that a recrawl's `server-not-modified` revisits point into counts as one
it depends on, as for identical-payload revisits."""

from __future__ import annotations

import dataclasses
import json

import pytest
import redis
from archiver_crawler.dedup import KnownPayloads

from archiver import conf
from crawls import dedup
from crawls.models import FileDependency, PayloadDigest
from tests.test_dedup import exchange, finished_crawl, kept_wacz

pytestmark = pytest.mark.django_db
SINCE = "Tue, 14 Nov 2023 22:13:20 GMT"


def with_validators(url: str, body: bytes, etag: str):
    ex = exchange(url, body)
    return dataclasses.replace(ex, response_headers=[*ex.response_headers, ("ETag", etag),
                                                     ("Last-Modified", SINCE)])


def not_modified(url: str):
    return dataclasses.replace(exchange(url, b""), status=304, reason="Not Modified",
                               response_headers=[("ETag", '"a1"')])


def handed(redis_url, crawl) -> tuple[dict, dict, dict]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        dedup.hand_to_crawler(client, crawl)
        keys = [f"{crawl.pk}:dedup", f"{crawl.pk}:dedup:urls", f"{crawl.pk}:dedup:files"]
        found = tuple(client.hgetall(k) for k in keys)
        client.delete(*keys)
        return found
    finally:
        client.close()


def test_validators_are_indexed_handed_per_url_and_304_revisits_make_a_dependency(
        conf_data_dir, redis_url):
    first, second = finished_crawl(), finished_crawl()
    first_file = kept_wacz(conf_data_dir, first, {
        "http://x/a": with_validators("http://x/a", b"page a", '"a1"'),
        "http://x/plain": b"no validators"})
    assert dedup.index_pending(conf.get()) == 1
    row = PayloadDigest.objects.get(url="http://x/a")
    assert (row.mime, row.etag, row.last_modified) == ("text/html", '"a1"', SINCE)
    assert PayloadDigest.objects.get(url="http://x/plain").etag == ""

    entries, urls, files = handed(redis_url, second)
    assert len(entries) == 2 and set(urls) == {"http://x/a"}
    assert json.loads(urls["http://x/a"]) == {
        "digest": row.digest, "date": row.date, "file": str(first_file.pk), "mime": "text/html",
        "etag": '"a1"', "lastModified": SINCE}

    known = KnownPayloads(entries, files, conf_data_dir / "work" / second.pk / "collections" / "coll",
                          urls)
    assert known.conditions("http://x/a") == [("If-None-Match", '"a1"'), ("If-Modified-Since", SINCE)]
    assert known.conditions("http://x/plain") == []
    second_file = kept_wacz(conf_data_dir, second, {"http://x/a": not_modified("http://x/a")}, known)
    assert dedup.index_pending(conf.get()) == 1
    assert FileDependency.objects.filter(file=second_file, required=first_file).exists()
    assert PayloadDigest.objects.filter(crawl_file=second_file).count() == 0  # a revisit holds none


def test_a_url_whose_payload_changed_is_handed_with_its_newest_validators(conf_data_dir, redis_url):
    first, second, third = finished_crawl(), finished_crawl(), finished_crawl()
    kept_wacz(conf_data_dir, first, {"http://x/a": with_validators("http://x/a", b"old", '"v1"')})
    kept_wacz(conf_data_dir, second, {"http://x/a": with_validators("http://x/a", b"new", '"v2"')})
    assert dedup.index_pending(conf.get()) == 2
    _, urls, _ = handed(redis_url, third)
    assert json.loads(urls["http://x/a"])["etag"] == '"v2"'


def test_validators_of_the_wrong_shape_are_left_out():
    assert dedup.validators_of({"etag": '"a"\r\nX: y', "lastModified": 7}) is None
    assert dedup.validators_of({"etag": "x" * 500, "lastModified": SINCE, "mime": "text/html"}) == (
        "text/html", "", SINCE)
    assert dedup.validators_of({"mime": "text/html"}) is None


def test_a_page_not_modified_is_searchable_by_the_kept_pages_text(conf_data_dir):
    from crawls.models import PageText
    from runner.indexing import kept_rows, page_rows

    first, second = finished_crawl(), finished_crawl()
    first_file = kept_wacz(conf_data_dir, first, {"http://x/a": b"a"})
    second_file = kept_wacz(conf_data_dir, second, {"http://x/b": b"b"}, name="two")
    PageText.objects.add(first.pk, first_file.pk, [("http://x/a", "Kept", "kept words", None)])
    unchanged: list = []
    entries = [{"format": "json-pages-1.0"},
               {"url": "http://x/a", "ts": "2026-01-02T03:04:05Z", "status": 200, "notModified": True},
               {"url": "http://x/gone", "notModified": True},
               {"url": "http://x/c", "title": "Fresh", "text": "new words"}]
    assert [r[0] for r in page_rows(iter(entries), unchanged)] == ["http://x/c"]
    rows = list(kept_rows(second_file, unchanged))
    assert [(url, title, text) for url, title, text, _ in rows] == [("http://x/a", "Kept", "kept words")]
    assert rows[0][3].year == 2026


def test_indexing_a_recrawl_gives_its_304_pages_the_kept_text(conf_data_dir):
    """index_file whole: its copy of the page rows, then the kept rows (PostgreSQL runs no
    query while it copies)."""
    import datetime as dt

    from crawls.models import PageText
    from runner.indexing import index_file

    first, second = finished_crawl(), finished_crawl()
    pages = [{"format": "json-pages-1.0"},
             {"url": "http://x/a", "ts": "2026-01-02T03:04:05Z", "status": 200, "notModified": True},
             {"url": "http://x/b", "title": "Fresh", "text": "new words"}]
    work = conf_data_dir / "work" / second.pk / "collections" / "coll" / "pages"
    work.mkdir(parents=True)
    (work / "pages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pages))
    first_file = kept_wacz(conf_data_dir, first, {"http://x/a": b"a"}, name="one")
    second_file = kept_wacz(conf_data_dir, second, {"http://x/b": b"b"})
    PageText.objects.add(first.pk, first_file.pk, [("http://x/a", "Kept", "kept words", None)])
    assert index_file(conf_data_dir, second_file, dt.datetime.now(dt.UTC)) == 2
    assert sorted(PageText.objects.filter(file=second_file).values_list("url", "title", "text")) == [
        ("http://x/a", "Kept", "kept words"), ("http://x/b", "Fresh", "new words")]

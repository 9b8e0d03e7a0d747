"""A crawl adopted from a dead home is handed over before anything is relaunched: its old
crawlers are asked to stop and waited for, then the pages Redis counts done that no
uploaded archive holds go back into the queue (runner/handover.py). Against a real
Redis, the moto server and the test database."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import zipfile

import pytest
from django.db.models import Sum

from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlLog, Org, Snapshot, SnapshotStatus
from runner import handover
from runner.launchers import hostname
from runner.progress import ProgressStore
from runner.redis_server import RedisEndpoint
from runner.state import Held, Runtime
from runner.uploads import reports_key
from tests.runner.archive_helpers import wacz_of
from tests.s3server import storage_settings

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
DB = 7
URLS = [f"http://site.test/{i}" for i in range(5)]
pytestmark = pytest.mark.django_db


@pytest.fixture
def rt(redis_server, s3_endpoint, bucket, data_dir):
    endpoint = RedisEndpoint(host="127.0.0.1", port=redis_server.port, databases=redis_server.databases)
    store = ProgressStore(endpoint)
    yield Runtime(settings=storage_settings(data_dir, s3_endpoint, bucket), launcher=None, store=store,
                  id="adopter", clock=lambda: T0, host_check=lambda crawl: None,
                  disk_check=lambda: None, host_usage=lambda: None)
    store.client(DB).flushdb()
    store.close()


@pytest.fixture
def adopted(rt, s3, bucket):
    """A crawl adopted at T0 from a dead home: its instance 0 said it was running, had done
    4 pages (u0..u3) of 5 seen, and uploaded one session holding u0 and u1 whose report
    nobody recorded yet; u4 is still queued."""
    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=[URLS[0]]))
    Crawl.objects.filter(pk=crawl.pk).update(redis_db=DB, lease_owner=rt.id, lease_token=1,
                                             status="running")
    crawl.refresh_from_db()
    rt.held[crawl.pk] = Held(token=1, renewed_at=T0)
    handover.begin(rt.held[crawl.pk], T0, rt.settings.lease_seconds, 4)
    r = rt.store.client(DB)
    r.hset(f"{crawl.pk}:status", hostname(crawl.pk, 0), "running")
    r.set(f"{crawl.pk}:d", 4)
    r.sadd(f"{crawl.pk}:s", *URLS)
    r.zadd(f"{crawl.pk}:q", {json.dumps({"url": URLS[4], "seedId": 0, "depth": 1, "extraHops": 0}): 1})
    for depth, url in enumerate(URLS[:4]):
        r.lpush(f"{crawl.pk}:pages", json.dumps({"url": url, "status": 200, "depth": min(depth, 1),
                                                 "seed": depth == 0, "loadState": 4}))
    data = wacz_of(URLS[:2])
    key = rt.settings.s3.crawl_prefix(crawl.pk) + "s1.wacz"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    r.rpush(reports_key(crawl.pk), json.dumps({
        "id": crawl.pk, "path": "s1.wacz", "size": len(data),
        "hash": hashlib.sha256(data).hexdigest(), "completed": False}))
    return crawl


def queued_urls(rt, crawl) -> set[str]:
    return {json.loads(entry)["url"] for entry in rt.store.client(DB).zrange(f"{crawl.pk}:q", 0, -1)}


def test_old_crawlers_are_asked_to_stop_and_waited_for_before_anything_is_requeued(rt, adopted):
    crawl, held, host = adopted, rt.held[adopted.pk], hostname(adopted.pk, 0)
    r = rt.store.client(DB)
    assert handover.pending(rt, crawl, held, T0 + dt.timedelta(seconds=1)) is True
    assert r.hget(f"{crawl.pk}:stopone", host) == "1"
    assert queued_urls(rt, crawl) == {URLS[4]} and r.get(f"{crawl.pk}:d") == "4"
    assert Crawl.objects.get(pk=crawl.pk).waiting_reason.startswith(handover.WAITING)

    r.hset(f"{crawl.pk}:status", host, "done")  # it stopped: finished its page, uploaded, reported
    assert handover.pending(rt, crawl, held, T0 + dt.timedelta(seconds=2)) is False

    assert held.handover_until is None
    assert [f.path.rsplit("/", 1)[1] for f in crawl.files.all()] == ["s1.wacz"]
    snapshots = {s.url: s for s in Snapshot.objects.filter(crawl=crawl)}
    assert {u: (s.status, s.filename) for u, s in snapshots.items()} == {
        URLS[0]: (SnapshotStatus.DONE, "s1.wacz"), URLS[1]: (SnapshotStatus.DONE, "s1.wacz"),
        URLS[2]: (SnapshotStatus.QUEUED, ""), URLS[3]: (SnapshotStatus.QUEUED, "")}
    assert queued_urls(rt, crawl) == {URLS[2], URLS[3], URLS[4]}
    assert r.get(f"{crawl.pk}:d") == "2"
    assert r.hgetall(f"{crawl.pk}:status") == {} and r.hgetall(f"{crawl.pk}:stopone") == {}
    assert Crawl.objects.get(pk=crawl.pk).waiting_reason == ""
    assert CrawlLog.objects.filter(crawl=crawl, message__startswith="2 page(s) done").exists()


def test_an_upload_its_crawler_never_reported_is_recorded_and_its_pages_are_not_queued_again(
        rt, adopted, s3, bucket):
    crawl, held = adopted, rt.held[adopted.pk]
    data = wacz_of(URLS[2:4])  # uploaded; the host died before the report was pushed
    key = rt.settings.s3.crawl_prefix(crawl.pk) + "s2.wacz"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    org_bytes = crawl.org.bytes_stored

    assert handover.pending(rt, crawl, held, held.handover_until) is False

    row = crawl.files.get(path=key)
    assert (row.root, row.size, row.sha256) == (f"s3://{bucket}", len(data), hashlib.sha256(data).hexdigest())
    assert crawl.files.count() == 2
    assert {s.url: (s.status, s.filename) for s in Snapshot.objects.filter(crawl=crawl)} == {
        URLS[0]: (SnapshotStatus.DONE, "s1.wacz"), URLS[1]: (SnapshotStatus.DONE, "s1.wacz"),
        URLS[2]: (SnapshotStatus.DONE, "s2.wacz"), URLS[3]: (SnapshotStatus.DONE, "s2.wacz")}
    assert queued_urls(rt, crawl) == {URLS[4]} and rt.store.client(DB).get(f"{crawl.pk}:d") == "4"
    assert Org.objects.get(pk=crawl.org_id).bytes_stored == org_bytes + crawl.files.aggregate(
        total=Sum("size"))["total"]
    assert not CrawlLog.objects.filter(crawl=crawl, message__contains="queued again").exists()


@pytest.mark.parametrize("name, body, why", [
    ("s2.wacz", b"not a zip", "not a zip file"),
    ("s2.wacz", b"", "0 bytes"),
    ("notes.txt", b"hello", "not a plain .wacz name"),
    ("sub/s2.wacz", None, "not a plain .wacz name"),
    ("nopackage.wacz", None, "no datapackage.json"),
])
def test_an_unreported_object_that_fails_the_checks_is_said_and_left_in_the_bucket(
        rt, adopted, s3, bucket, name, body, why):
    crawl, held = adopted, rt.held[adopted.pk]
    if body is None and name.startswith("sub/"):
        body = wacz_of(URLS[2:4])
    elif body is None:  # a zip, but no WACZ
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as wacz:
            wacz.writestr("pages/pages.jsonl", json.dumps({"url": URLS[2]}) + "\n")
        body = buffer.getvalue()
    key = rt.settings.s3.crawl_prefix(crawl.pk) + name
    s3.put_object(Bucket=bucket, Key=key, Body=body)

    assert handover.pending(rt, crawl, held, held.handover_until) is False

    assert not crawl.files.filter(path=key).exists()
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)  # never deleted
    said = CrawlLog.objects.filter(crawl=crawl, message__contains=why)
    assert said.filter(message__contains="not recorded").exists(), list(
        CrawlLog.objects.filter(crawl=crawl).values_list("message", flat=True))
    assert queued_urls(rt, crawl) == {URLS[2], URLS[3], URLS[4]}  # its pages are not trusted to it


def test_a_host_that_never_answers_is_taken_as_gone_after_the_wait(rt, adopted):
    crawl, held = adopted, rt.held[adopted.pk]
    assert handover.pending(rt, crawl, held, T0 + dt.timedelta(seconds=1)) is True
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    assert queued_urls(rt, crawl) == {URLS[2], URLS[3], URLS[4]}
    assert CrawlLog.objects.filter(crawl=crawl, message__contains="did not stop in time").exists()


def test_a_second_look_requeues_nothing_twice(rt, adopted):
    crawl, held = adopted, rt.held[adopted.pk]
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    handover.begin(held, T0, rt.settings.lease_seconds, 4)  # adopted again (the adopter died)
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    assert rt.store.client(DB).get(f"{crawl.pk}:d") == "2"
    assert rt.store.client(DB).zcard(f"{crawl.pk}:q") == 3


def test_with_the_store_away_the_handover_waits_and_requeues_nothing(rt, adopted, s3_endpoint, bucket,
                                                                     data_dir):
    crawl, held = adopted, rt.held[adopted.pk]
    rt.settings = storage_settings(data_dir, "http://127.0.0.1:9", bucket)
    assert handover.pending(rt, crawl, held, held.handover_until) is True
    assert queued_urls(rt, crawl) == {URLS[4]} and rt.store.client(DB).get(f"{crawl.pk}:d") == "4"
    assert held.handover_until is not None
    rt.settings = storage_settings(data_dir, s3_endpoint, bucket)  # back
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    assert queued_urls(rt, crawl) == {URLS[2], URLS[3], URLS[4]}


def test_a_page_list_is_read_by_ranges_not_by_fetching_the_whole_archive(rt, s3, bucket):
    from crawls import storage
    from runner import file_guard, wacz_members

    data = wacz_of(URLS) + b""  # small members first, then a large WARC
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wacz:
        wacz.writestr("archive/big.warc", b"x" * (8 << 20), compress_type=zipfile.ZIP_STORED)
        with zipfile.ZipFile(io.BytesIO(data)) as small:
            wacz.writestr("pages/pages.jsonl", small.read("pages/pages.jsonl"))
    data = buffer.getvalue()
    s3.put_object(Bucket=bucket, Key="k.wacz", Body=data)
    objects = storage.object_store(rt.settings)
    reads = []
    real_read = objects.read
    objects.read = lambda key, first, last: reads.append(last - first + 1) or real_read(key, first, last)
    with objects.open("k.wacz", len(data)) as handle:
        got = [e["url"] for e in wacz_members.page_entries(handle, len(data), file_guard.Limits()) if "url" in e]
    assert got == URLS
    assert sum(reads) < 4 << 20, reads  # the 8 MiB WARC was not fetched


def test_many_lost_pages_are_requeued_a_batch_at_a_time(rt, adopted):
    crawl, held = adopted, rt.held[adopted.pk]
    extra = [f"http://site.test/x{i}" for i in range(1234)]
    Snapshot.objects.bulk_create([Snapshot(crawl=crawl, url=url, depth=2) for url in extra])
    rt.store.client(DB).incrby(f"{crawl.pk}:d", len(extra))
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    assert queued_urls(rt, crawl) == {URLS[2], URLS[3], URLS[4], *extra}
    assert rt.store.client(DB).get(f"{crawl.pk}:d") == "2"
    assert not Snapshot.objects.filter(crawl=crawl, status=SnapshotStatus.DONE, filename="").exists()


def test_an_uploaded_archive_whose_pages_list_is_a_bomb_is_refused_quickly_and_its_pages_requeued(
        rt, adopted, s3, bucket, monkeypatch):
    from tests.bombs import at_most_the_line_limit, counted_page_list_reads, newline_wacz

    crawl, held = adopted, rt.held[adopted.pk]
    data = newline_wacz(head=b"".join(json.dumps({"url": url, "loadState": 4}).encode() + b"\n"
                                      for url in URLS[:2]))
    key = rt.settings.s3.crawl_prefix(crawl.pk) + "s1.wacz"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    rt.store.client(DB).delete(reports_key(crawl.pk))
    rt.store.client(DB).rpush(reports_key(crawl.pk), json.dumps({
        "id": crawl.pk, "path": "s1.wacz", "size": len(data),
        "hash": hashlib.sha256(data).hexdigest(), "completed": False}))

    costs = counted_page_list_reads(monkeypatch)
    assert handover.pending(rt, crawl, held, held.handover_until) is False
    assert at_most_the_line_limit(costs)  # a few MB of the GiB, read from the bucket
    assert queued_urls(rt, crawl) == set(URLS)  # none trusted to the unreadable archive
    assert CrawlLog.objects.filter(crawl=crawl, level="warning",
                                   message__contains="over 2000000 lines").exists()

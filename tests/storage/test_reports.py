"""The runner's side of uploads: reports checked as hostile input, each upload recorded once
(whatever is killed between reading a report and trimming it), objects verified by HEAD."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
from types import SimpleNamespace

import pytest
import redis

from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, Org
from runner import uploads
from runner.launchers import LaunchSpec
from runner.progress import ProgressStore
from runner.redis_server import RedisEndpoint
from runner.uploads import BadReport, parse_report, record_reports, reports_key
from tests.ports import free_port
from tests.s3server import ACCESS_KEY, SECRET_KEY, storage_settings

T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
DIGEST = "ab" * 32


def report(crawl_id: str = "c1", **changes) -> str:
    body = {"id": crawl_id, "user": "", "filename": "http://s3/b/p/c1/x.wacz", "path": "x.wacz",
            "size": 10, "hash": DIGEST, "bytes": 10, "completed": True, **changes}
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def test_a_report_of_the_real_crawler_s_shape_is_read():
    parsed = parse_report(report(), "c1", 1000)
    assert (parsed.name, parsed.size, parsed.sha256, parsed.completed) == ("x.wacz", 10, DIGEST, True)
    assert parse_report(report(completed=False, bytes=...), "c1", 1000).completed is False
    assert parse_report(report(hash="sha256:" + DIGEST), "c1", 1000).sha256 == DIGEST


@pytest.mark.parametrize("raw, why", [
    (report(crawl_id="c2"), "another crawl"),
    (report(path="../c2/x.wacz"), "not a plain .wacz name"),
    (report(path="x.warc"), "not a plain .wacz name"),
    (report(path=".x.wacz"), "not a plain .wacz name"),
    (report(size=True), "a size of"),
    (report(size=0), "a size of"),
    (report(size=1001), "a size of"),
    (report(size="10"), "a size of"),
    (report(bytes=11), "differ"),
    (report(hash="AB" * 32), "no hex SHA-256"),
    (report(hash=None), "no hex SHA-256"),
    ("[1, 2]", "not a JSON object"),
    ("{", "not JSON"),
    ("x" * 20000, "bytes"),
])
def test_a_hostile_report_is_refused_with_a_reason(raw, why):
    with pytest.raises(BadReport, match=why):
        parse_report(raw, "c1", 1000)


# --- recording against moto and a real Redis ------------------------------------------------


@pytest.fixture
def runtime(redis_server, s3_endpoint, bucket, data_dir):
    endpoint = RedisEndpoint(host="127.0.0.1", port=redis_server.port, databases=redis_server.databases)
    store = ProgressStore(endpoint)
    yield SimpleNamespace(settings=storage_settings(data_dir, s3_endpoint, bucket), store=store,
                          stop_event=threading.Event())
    store.client(7).flushdb()
    store.close()


@pytest.fixture
def crawl(db) -> Crawl:
    org = Org.objects.get_or_create(slug="default")[0]
    crawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    Crawl.objects.filter(pk=crawl.pk).update(redis_db=7)
    crawl.refresh_from_db()
    return crawl


def uploaded(s3, bucket: str, crawl: Crawl, name: str, data: bytes) -> str:
    """An object put where the crawler puts it, and the report it would send."""
    s3.put_object(Bucket=bucket, Key=f"archiver/{crawl.pk}/{name}", Body=data)
    return report(crawl.pk, path=name, size=len(data), bytes=len(data),
                  hash=hashlib.sha256(data).hexdigest())


def test_each_reported_upload_is_recorded_once_with_its_size_and_digest(runtime, crawl, s3, bucket):
    client = runtime.store.client(7)
    client.rpush(reports_key(crawl.pk), uploaded(s3, bucket, crawl, "a.wacz", b"a" * 100),
                 uploaded(s3, bucket, crawl, "b.wacz", b"b" * 50))
    kept = record_reports(runtime, crawl, T0)
    assert kept.added_bytes == 150 and not kept.warnings
    rows = {f.path: f for f in crawl.files.all()}
    assert set(rows) == {f"archiver/{crawl.pk}/a.wacz", f"archiver/{crawl.pk}/b.wacz"}
    assert rows[f"archiver/{crawl.pk}/a.wacz"].sha256 == hashlib.sha256(b"a" * 100).hexdigest()
    assert {f.root for f in rows.values()} == {f"s3://{bucket}"}
    assert client.llen(reports_key(crawl.pk)) == 0
    assert Org.objects.get(pk=crawl.org_id).bytes_stored == 150


def test_a_runner_killed_between_the_record_and_the_trim_records_nothing_twice(runtime, crawl, s3, bucket):
    raw = uploaded(s3, bucket, crawl, "a.wacz", b"a" * 100)
    client = runtime.store.client(7)
    client.rpush(reports_key(crawl.pk), raw)
    record_reports(runtime, crawl, T0)
    # As if the runner died before LTRIM: the same report is read again by the next runner.
    client.rpush(reports_key(crawl.pk), raw, uploaded(s3, bucket, crawl, "b.wacz", b"b" * 7))
    kept = record_reports(runtime, crawl, T0)
    assert kept.added_bytes == 7
    assert crawl.files.count() == 2
    assert Org.objects.get(pk=crawl.org_id).bytes_stored == 107
    assert client.llen(reports_key(crawl.pk)) == 0


def test_a_report_without_its_object_or_of_another_size_is_said_and_dropped(runtime, crawl, s3, bucket):
    client = runtime.store.client(7)
    good = uploaded(s3, bucket, crawl, "a.wacz", b"a" * 100)
    client.rpush(reports_key(crawl.pk), report(crawl.pk, path="gone.wacz"),
                 report(crawl.pk, path="a.wacz", size=99, bytes=99), "not json", good)
    kept = record_reports(runtime, crawl, T0)
    assert [f.path for f in kept.files] == [f"archiver/{crawl.pk}/a.wacz"]
    assert any("gone.wacz reported 10 bytes but no such object" in w for w in kept.warnings)
    assert any("the object has 100 bytes" in w for w in kept.warnings)
    assert client.llen(reports_key(crawl.pk)) == 0


def test_reports_wait_while_the_store_does_not_answer(runtime, crawl, data_dir):
    runtime.settings = storage_settings(data_dir, f"http://127.0.0.1:{free_port()}", "away")
    client = runtime.store.client(7)
    client.rpush(reports_key(crawl.pk), report(crawl.pk))
    kept = record_reports(runtime, crawl, T0)
    assert kept.files == [] and "uploads not recorded yet" in kept.warnings[0]
    assert SECRET_KEY not in kept.warnings[0]
    assert client.llen(reports_key(crawl.pk)) == 1  # kept for the next look
    assert not CrawlFile.objects.exists()


def test_reports_wait_while_redis_does_not_answer(runtime, crawl):
    runtime.store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=free_port()))
    kept = record_reports(runtime, crawl, T0)
    assert kept.files == [] and "Redis failed" in kept.warnings[0]


# --- the contract handed to crawlers ------------------------------------------------------


def test_the_contract_reaches_the_crawler_s_environment_and_nothing_else(runtime, crawl, data_dir):
    target = runtime.settings.s3
    spec = LaunchSpec(crawl_id=crawl.pk, instance=0, process_id=42, instance_dir=data_dir, workers=1,
                      redis=RedisEndpoint(host="127.0.0.1", port=6390, password="pw", username="u"),
                      db=7, runner_id="r", storage_env=uploads.crawler_env(target, crawl.pk, "h", 42),
                      report_key=reports_key(crawl.pk))
    env = spec.environment("redis")
    assert env["STORE_ENDPOINT_URL"] == f"{target.endpoint}/{target.bucket}/"
    assert env["STORE_PATH"] == f"archiver/{crawl.pk}/"
    assert (env["STORE_ACCESS_KEY"], env["STORE_SECRET_KEY"]) == (ACCESS_KEY, SECRET_KEY)
    assert env["STORE_REGION"] == "us-east-1" and env["STORE_FILENAME"] == "@ts-h-42.wacz"
    assert env["WEBHOOK_URL"] == f"redis://u:pw@redis:6390/7/{crawl.pk}:uploads"
    assert len(env["WEBHOOK_URL"].split("/")) == 5  # the real crawler's check
    assert env["CRAWL_ID"] == crawl.pk
    shown = repr(spec) + " ".join(spec.crawler_args("/crawls"))
    assert SECRET_KEY not in shown and ACCESS_KEY not in shown
    bare = LaunchSpec(crawl_id="c", instance=0, process_id=1, instance_dir=data_dir, workers=1,
                      redis=spec.redis, db=7, runner_id="r")
    assert bare.environment() == {"CRAWL_ID": "c"}  # local storage: nothing changes


def test_crawler_keys_can_differ_from_the_runner_s(data_dir, s3_endpoint):
    settings = storage_settings(data_dir, s3_endpoint, "bkt", storage_crawler_access_key="ck",
                                storage_crawler_secret_key="cs")
    env = uploads.crawler_env(settings.s3, "c1", "h", 1)
    assert (env["STORE_ACCESS_KEY"], env["STORE_SECRET_KEY"]) == ("ck", "cs")
    assert settings.s3.access_key == ACCESS_KEY


def test_redis_keeps_no_report_after_the_crawl_s_clean_up_reads_them(runtime, crawl, s3, bucket):
    # keep.keep_leftovers reads the last reports before the database is flushed.
    from runner.keep import keep_leftovers

    runtime.store.client(7).rpush(reports_key(crawl.pk), uploaded(s3, bucket, crawl, "z.wacz", b"z"))
    rt = SimpleNamespace(**vars(runtime), held={}, event=lambda *a, **k: None,
                         note=lambda *a, **k: None)
    keep_leftovers(rt, crawl, T0)
    assert crawl.files.get().path.endswith("/z.wacz")
    assert redis.Redis(port=runtime.store.endpoint.port, db=7).llen(reports_key(crawl.pk)) == 0


def test_an_upload_nobody_reported_is_recorded_at_the_crawl_s_end_and_a_bad_one_is_said(
        runtime, crawl, s3, bucket):
    from crawls.models import Snapshot, SnapshotStatus
    from runner.keep import keep_leftovers
    from tests.runner.archive_helpers import wacz_of

    Snapshot.objects.create(crawl=crawl, url="http://site/a", status=SnapshotStatus.DONE)
    data = wacz_of(["http://site/a"])
    s3.put_object(Bucket=bucket, Key=f"archiver/{crawl.pk}/late.wacz", Body=data)  # never reported
    s3.put_object(Bucket=bucket, Key=f"archiver/{crawl.pk}/torn.wacz", Body=b"PK not a zip")
    notes = []
    rt = SimpleNamespace(**vars(runtime), held={}, event=lambda *a, **k: None,
                         note=lambda crawl, message, *a, **k: notes.append(message))
    keep_leftovers(rt, crawl, T0)
    row = crawl.files.get()
    assert (row.path, row.size, row.sha256) == (f"archiver/{crawl.pk}/late.wacz", len(data),
                                                hashlib.sha256(data).hexdigest())
    assert Crawl.objects.get(pk=crawl.pk).size_bytes == len(data)
    assert Snapshot.objects.get(crawl=crawl).filename == "late.wacz"
    assert [n for n in notes if "torn.wacz" in n and "not recorded, left in the bucket" in n], notes
    assert s3.head_object(Bucket=bucket, Key=f"archiver/{crawl.pk}/torn.wacz")  # never deleted
    keep_leftovers(rt, crawl, T0)  # a second look records nothing twice
    assert crawl.files.count() == 1 and Crawl.objects.get(pk=crawl.pk).size_bytes == len(data)


def test_the_pages_of_an_uploaded_session_are_named_after_its_object(runtime, crawl, s3, bucket, data_dir):
    # With a bucket there is no kept local WACZ: the session's own WACZ is read before the
    # runner deletes it, and its pages get the name of the recorded object of the same SHA-256.
    from crawls.models import Process, Snapshot
    from runner.keep import keep_session
    from tests.runner.archive_helpers import wacz_with_pages

    process = Process.objects.create(crawl=crawl, instance=0, hostname=f"crawl-{crawl.pk}-0",
                                     launcher="local")
    for url in ("http://site/a", "http://site/b", "http://site/c"):
        Snapshot.objects.create(crawl=crawl, url=url)
    wacz = wacz_with_pages("http://site/a", "http://site/b")
    collection = data_dir / "crawls" / crawl.pk / "0" / "collections" / crawl.pk
    collection.mkdir(parents=True)
    (collection / f"{crawl.pk}.wacz").write_bytes(wacz)
    runtime.store.client(7).rpush(reports_key(crawl.pk), uploaded(s3, bucket, crawl, "up.wacz", wacz))
    notes = []
    rt = SimpleNamespace(**vars(runtime), held={}, event=lambda *a, **k: None,
                         note=lambda crawl, text, *a: notes.append(text))

    keep_session(rt, crawl, process, T0)

    assert crawl.files.get().path == f"archiver/{crawl.pk}/up.wacz"
    names = dict(Snapshot.objects.filter(crawl=crawl).values_list("url", "filename"))
    assert names == {"http://site/a": "up.wacz", "http://site/b": "up.wacz", "http://site/c": ""}
    assert not (collection / f"{crawl.pk}.wacz").exists() and notes == []
    keep_session(rt, crawl, process, T0)  # nothing left to read: nothing happens, nothing said
    assert notes == [] and crawl.files.count() == 1

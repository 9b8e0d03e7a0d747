"""The search index reads archives kept in the bucket (a real S3-compatible server), by
ranged GETs; one in a bucket the settings do not name is left unindexed with its reason."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from crawls import search, storage
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, Org, PageText
from runner import indexing
from tests.s3server import storage_settings
from tests.search.waczs import real_crawler_page, write_wacz

NOW = dt.datetime(2026, 12, 2, 6, 0, tzinfo=dt.UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def uploaded(data_dir, s3, bucket):
    """A crawl whose one WACZ is in the bucket, recorded as the runner records an upload."""
    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0], CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    wacz = write_wacz(data_dir / "made.wacz", [
        real_crawler_page("https://a.test/tide", "Tide tables", "the spring tide floods the causeway"),
        real_crawler_page("https://a.test/ferry", "Ferry", "the ferry leaves at noon")])
    body = wacz.read_bytes()
    key = f"archiver/{crawl.pk}/{crawl.pk}-0-1.wacz"
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    return CrawlFile.objects.create(crawl=crawl, root=f"s3://{bucket}", path=key, size=len(body),
                                    sha256=hashlib.sha256(body).hexdigest())


def test_an_archive_in_the_bucket_is_indexed_and_found(data_dir, s3_endpoint, bucket, uploaded):
    store = storage.object_store(storage_settings(data_dir, s3_endpoint, bucket))
    assert indexing.index_next(data_dir, NOW, store=store)
    uploaded.refresh_from_db()
    assert uploaded.indexed_at == NOW and uploaded.index_error == ""
    (hit,) = search.search("causeway")
    assert (hit.url, hit.title, hit.crawl_id) == ("https://a.test/tide", "Tide tables", uploaded.crawl_id)


def test_an_archive_in_a_bucket_not_configured_is_left_with_its_reason(data_dir, uploaded):
    assert indexing.index_next(data_dir, NOW, store=None)
    uploaded.refresh_from_db()
    assert uploaded.indexed_at is None and "a bucket ARCHIVER_STORAGE_URL does not name" in uploaded.index_error
    assert uploaded.index_retry_at > NOW and not PageText.objects.exists()

"""Retention, `delete` and a cancel remove a crawl's objects from the bucket, and keep the
crawl (and its rows) when the store refuses, so a later pass tries again."""

from __future__ import annotations

import datetime as dt

import pytest

from archiver.errors import ActionRefused
from crawls import actions
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, CrawlStatus, Org
from crawls.retention import purge_expired
from crawls.storage import object_store
from runner import archive
from tests.ports import free_port
from tests.s3server import storage_settings

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def settings(data_dir, s3_endpoint, bucket):
    return storage_settings(data_dir, s3_endpoint, bucket, retention_days=30)


@pytest.fixture
def kept(settings, s3, bucket):
    """A crawl finished 40 days ago whose two archives are objects in the bucket."""
    org = Org.objects.get_or_create(slug="default")[0]
    crawl = Crawl.create(org, CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE, retry_at=None,
                                             finished_at=NOW - dt.timedelta(days=40))
    for name in ("a.wacz", "b.wacz"):
        key = f"archiver/{crawl.pk}/{name}"
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * 10)
        CrawlFile.objects.create(crawl=crawl, path=key, root=f"s3://{bucket}", size=10, sha256="0" * 64)
    org.add_bytes(20)
    crawl.refresh_from_db()
    return crawl


def keys(s3, bucket, crawl) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"archiver/{crawl.pk}/")
            .get("Contents", [])]


def test_retention_deletes_the_objects_then_the_rows(kept, settings, s3, bucket):
    assert len(keys(s3, bucket, kept)) == 2
    assert purge_expired(NOW, settings=settings)
    assert keys(s3, bucket, kept) == []
    assert not Crawl.objects.filter(pk=kept.pk).exists()
    assert Org.objects.get(slug="default").bytes_stored == 0


def test_retention_keeps_the_crawl_while_the_store_does_not_answer(kept, settings, data_dir, bucket):
    away = settings.model_copy(update={"storage_endpoint": f"http://127.0.0.1:{free_port()}"})
    purge_expired(NOW, settings=away)
    assert kept.files.count() == 2 and Crawl.objects.filter(pk=kept.pk).exists()


def test_delete_removes_the_objects(kept, settings, s3, bucket):
    actions.delete(kept, settings)
    assert keys(s3, bucket, kept) == [] and not Crawl.objects.filter(pk=kept.pk).exists()


def test_delete_refuses_when_the_bucket_is_not_the_configured_one(kept, data_dir, s3_endpoint):
    elsewhere = storage_settings(data_dir, s3_endpoint, "another-bucket")
    with pytest.raises(ActionRefused, match="in a bucket that ARCHIVER_STORAGE_URL no longer names"):
        actions.delete(kept, elsewhere)
    assert kept.files.count() == 2


def test_a_cancel_deletes_the_objects_through_the_runner_s_file_boundary(kept, settings, s3, bucket):
    removed = archive.delete_files(settings.data_dir, kept, object_store(settings))
    assert (removed.deleted, removed.deleted_bytes, removed.warnings) == (2, 20, [])
    assert keys(s3, bucket, kept) == [] and kept.files.count() == 0
    assert Org.objects.get(slug="default").bytes_stored == 0

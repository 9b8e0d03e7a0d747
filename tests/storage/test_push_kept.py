"""WARCs the runner kept itself at a crawl's end (no crawler packaged them) go to the bucket
too, and a crash between the upload and the row's update is repaired on the next call."""

from __future__ import annotations

import datetime as dt
import hashlib
from types import SimpleNamespace

import pytest

from crawls.config import CrawlConfig
from crawls.models import Crawl, Org
from runner import archive, uploads
from tests.s3server import storage_settings

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def rt(data_dir, s3_endpoint, bucket):
    return SimpleNamespace(settings=storage_settings(data_dir, s3_endpoint, bucket))


@pytest.fixture
def kept_locally(rt):
    """A crawl with one WARC kept under the data dir, as keep_leftovers records it."""
    crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0],
                         CrawlConfig(seeds=["http://127.0.0.1:9/"]))
    folder = rt.settings.data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    name = f"{crawl.pk}-0-1-rec.warc.gz"
    (folder / name).write_bytes(b"w" * 300)
    row, _ = archive.record(crawl, f"archives/{crawl.pk}/{name}", 300,
                            hashlib.sha256(b"w" * 300).hexdigest(), T0, root=str(rt.settings.data_dir))
    return crawl, row, folder / name


def test_a_file_kept_under_the_data_dir_moves_to_the_bucket(rt, kept_locally, s3, bucket):
    crawl, row, local = kept_locally
    assert uploads.push_kept(rt, crawl, T0) == []
    row.refresh_from_db()
    assert (row.root, row.path) == (f"s3://{bucket}", f"archiver/{crawl.pk}/{local.name}")
    assert s3.get_object(Bucket=bucket, Key=row.path)["Body"].read() == b"w" * 300
    assert not local.exists()


def test_a_crash_after_the_upload_and_the_delete_is_repaired(rt, kept_locally, s3, bucket):
    crawl, row, local = kept_locally
    s3.put_object(Bucket=bucket, Key=f"archiver/{crawl.pk}/{local.name}", Body=local.read_bytes())
    local.unlink()  # ... and the runner died before it updated the row
    assert uploads.push_kept(rt, crawl, T0) == []
    row.refresh_from_db()
    assert row.root == f"s3://{bucket}" and crawl.files.count() == 1


def test_a_file_that_is_gone_everywhere_stays_recorded_with_a_warning(rt, kept_locally):
    crawl, row, local = kept_locally
    local.unlink()
    warnings = uploads.push_kept(rt, crawl, T0)
    assert "stays under the data dir" in warnings[0]
    row.refresh_from_db()
    assert row.path.startswith("archives/")

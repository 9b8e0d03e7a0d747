"""A crawl through the real daemon with archives in a bucket of a real S3-compatible server
(moto's, on 127.0.0.1): every session's WACZ uploaded by the crawler at its exit, recorded
once by the runner with the object's size and SHA-256, served with Range by the admin from
the bucket, and deleted from it with the crawl. Once with local crawler processes, once with
containers (the crawler image of this branch: ARCHIVER_CRAWLER_IMAGE)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from archiver import conf
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlFile, Org
from tests.installation import Installation
from tests.runner.helpers import slow_site, wacz_pages
from tests.s3server import ACCESS_KEY, SECRET_KEY, storage_env
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
FINAL = ("complete", "failed", "canceled", "stopped_by_user")
PAGES = 30  # and the seed's index page


@pytest.fixture
def installation(data_dir, s3_endpoint, bucket):
    inst = Installation(data_dir)
    inst.env.update(storage_env(s3_endpoint, bucket))
    inst.migrate()
    try:
        yield inst
    finally:
        inst.clean_up()


def crawl_with_a_pause(inst: Installation) -> str:
    """A crawl paused midway and resumed: two sessions, so two uploads of one instance."""
    with slow_site(pages=PAGES, delay=0.3) as site:
        inst.start_daemon()
        crawl_id = inst.manage("add", site.url).strip()
        inst.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=60)
        site.hold()  # the crawl cannot end before the pause reaches it, however slow `pause` starts
        inst.manage("pause", crawl_id)
        wait_for(lambda: inst.flag_raised(crawl_id, "paused"), what="the daemon asking to pause")
        site.release()
        paused = inst.wait(crawl_id, lambda c: c["status"] in ("paused", *FINAL), timeout=60)
        assert paused["status"] == "paused", paused
        inst.manage("resume", crawl_id)
        state = inst.wait(crawl_id, lambda c: c["status"] in FINAL, timeout=120)
    assert state["status"] == "complete", state
    return crawl_id


def objects_of(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {item["Key"]: s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            for item in listing}


def check_recorded_once(inst: Installation, crawl_id: str, s3, bucket: str, tmp_path) -> list[tuple]:
    rows = inst.query("SELECT path, root, size, sha256 FROM crawls_crawlfile WHERE crawl_id = ? "
                      "ORDER BY id", crawl_id)
    objects = objects_of(s3, bucket, f"archiver/{crawl_id}/")
    assert len(rows) >= 2  # one per session: the pause's and the end's
    assert sorted(path for path, *_ in rows) == sorted(objects)  # every upload, each once
    for path, root, size, digest in rows:
        assert root == f"s3://{bucket}"
        assert (size, digest) == (len(objects[path]), hashlib.sha256(objects[path]).hexdigest())
    # Each session's WACZ holds only its own pages: the runner forgot what the upload held.
    pages, named = [], {}
    for number, (key, data) in enumerate(objects.items()):
        (tmp_path / f"{number}.wacz").write_bytes(data)
        listed = wacz_pages(tmp_path / f"{number}.wacz")
        pages += listed
        named.update(dict.fromkeys(listed, key.rsplit("/", 1)[1]))
    assert len(pages) == len(set(pages)) == PAGES + 1
    # Each page names the object that holds it, read from the session's WACZ before the
    # runner deleted it (there is no local copy to read later).
    assert dict(inst.query("SELECT url, filename FROM crawls_snapshot WHERE crawl_id = ?",
                           crawl_id)) == named
    # Each session counts the pages and bytes of the object recorded for it.
    per_object = {(list(named.values()).count(path.rsplit("/", 1)[1]), size) for path, _, size, _ in rows}
    sessions = inst.query("SELECT pages_done, size_bytes FROM crawls_process WHERE crawl_id = ?", crawl_id)
    assert set(sessions) <= per_object and sum(pages for pages, _ in sessions) == PAGES + 1
    (size_bytes, org_bytes), = inst.query(
        "SELECT c.size_bytes, o.bytes_stored FROM crawls_crawl c JOIN crawls_org o ON o.id = c.org_id "
        "WHERE c.id = ?", crawl_id)
    assert size_bytes == org_bytes == sum(size for _, _, size, _ in rows)
    assert not (inst.data_dir / "archives" / crawl_id).exists() or \
        not any((inst.data_dir / "archives" / crawl_id).iterdir())
    assert not (inst.data_dir / "crawls" / crawl_id).exists()
    return rows


def check_searchable(inst: Installation, crawl_id: str, uploads: int) -> None:
    """The daemon indexes the uploads in the bucket: every page is found by search."""
    wait_for(lambda: inst.query("SELECT count(*) FROM crawls_crawlfile WHERE crawl_id = ? AND indexed_at "
                                "IS NOT NULL", crawl_id) == [(uploads,)], timeout=60,
             what="the daemon indexing the uploads")
    hits = json.loads(inst.manage("search", "lorem", "--crawl", crawl_id, "--limit", "100", "--json"))
    assert len({hit["url"] for hit in hits}) >= PAGES // 2, hits


def check_no_secret_shown(inst: Installation, crawl_id: str) -> None:
    logs = "".join(p.read_text() for p in inst.data_dir.glob("daemon-*.log"))
    logs += inst.manage("logs", crawl_id)
    logs += "".join(str(row) for row in inst.query("SELECT args, log_tail FROM crawls_process"))
    assert SECRET_KEY not in logs and ACCESS_KEY not in logs


def check_download_with_range(rows, s3_endpoint, bucket, admin_client, monkeypatch) -> None:
    """The admin serves the object from the bucket: whole, and a range of it."""
    for name, value in storage_env(s3_endpoint, bucket).items():
        monkeypatch.setenv(name, value)
    conf.get.cache_clear()
    try:
        crawl = Crawl.create(Org.objects.get_or_create(slug="default")[0],
                             CrawlConfig(seeds=["http://127.0.0.1:9/"]))
        path, root, size, digest = rows[0]
        crawl_file = CrawlFile.objects.create(crawl=crawl, path=path, root=root, size=size, sha256=digest)
        from crawls.admin.views import download_url

        whole = admin_client.get(download_url(crawl_file))
        assert whole.status_code == 200 and whole["Content-Length"] == str(size)
        data = b"".join(whole.streaming_content)
        assert hashlib.sha256(data).hexdigest() == digest
        part = admin_client.get(download_url(crawl_file), headers={"Range": "bytes=100-1123"})
        assert part.status_code == 206
        assert part["Content-Range"] == f"bytes 100-1123/{size}"
        assert b"".join(part.streaming_content) == data[100:1124]
        tail = admin_client.get(download_url(crawl_file), headers={"Range": "bytes=-22"})
        assert b"".join(tail.streaming_content) == data[-22:]  # a zip's end record
        assert admin_client.get(download_url(crawl_file),
                                headers={"Range": f"bytes={size}-"}).status_code == 416
    finally:
        monkeypatch.undo()
        conf.get.cache_clear()


@pytest.mark.django_db
@pytest.mark.usefixtures("admin_settings")
def test_a_local_crawl_uploads_every_session_and_the_runner_records_each_once(
        installation, s3, s3_endpoint, bucket, admin_client, monkeypatch, tmp_path):
    crawl_id = crawl_with_a_pause(installation)
    rows = check_recorded_once(installation, crawl_id, s3, bucket, tmp_path)
    check_no_secret_shown(installation, crawl_id)
    check_download_with_range(rows, s3_endpoint, bucket, admin_client, monkeypatch)
    check_searchable(installation, crawl_id, len(rows))

    installation.manage("delete", crawl_id)
    assert objects_of(s3, bucket, f"archiver/{crawl_id}/") == {}
    assert installation.query("SELECT count(*) FROM crawls_crawlfile") == [(0,)]


@pytest.mark.docker
@pytest.mark.django_db
@pytest.mark.usefixtures("admin_settings")
def test_a_crawl_in_containers_uploads_to_the_bucket_too(
        installation, crawler_image, s3, s3_endpoint, bucket, admin_client, monkeypatch, tmp_path):
    installation.env.update(ARCHIVER_LAUNCHER="docker", ARCHIVER_CRAWLER_IMAGE=crawler_image,
                            DOCKER_HOST=os.environ.get("DOCKER_HOST", ""))
    crawl_id = crawl_with_a_pause(installation)
    assert installation.query("SELECT DISTINCT launcher FROM crawls_process") == [("docker",)]
    rows = check_recorded_once(installation, crawl_id, s3, bucket, tmp_path)
    check_no_secret_shown(installation, crawl_id)
    check_download_with_range(rows, s3_endpoint, bucket, admin_client, monkeypatch)

    installation.manage("delete", crawl_id)
    assert objects_of(s3, bucket, f"archiver/{crawl_id}/") == {}


def test_a_daemon_killed_while_its_crawler_uploads_records_every_upload_once_after_restart(
        installation, s3, bucket, tmp_path):
    with slow_site(pages=PAGES, delay=0.3) as site:
        first = installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=60)
        site.hold()  # the crawl cannot end before the pause reaches it, however slow `pause` starts
        installation.manage("pause", crawl_id)
        # The crawler packages, uploads and reports while no daemon runs (local crawlers
        # outlive it); the next daemon finds the exit and the report in Redis.
        wait_for(lambda: installation.flag_raised(crawl_id, "paused"), what="the daemon asking to pause")
        first.kill()
        first.wait()
        site.release()
        installation.start_daemon()
        paused = installation.wait(crawl_id, lambda c: c["status"] in ("paused", *FINAL), timeout=90)
        assert paused["status"] == "paused", paused
        installation.manage("resume", crawl_id)
        state = installation.wait(crawl_id, lambda c: c["status"] in FINAL, timeout=120)
    assert state["status"] == "complete", state
    check_recorded_once(installation, crawl_id, s3, bucket, tmp_path)

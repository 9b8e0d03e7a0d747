"""POST /api/v1/imports through gunicorn: an archive larger than the API's 2.5 MB body cap,
streamed to the server's data dir and imported; a hostile one refused (422) and one over the
org's quota (413), each leaving no row and no file (issue 43)."""

from __future__ import annotations

import gzip

import pytest
from django.conf import settings

from crawls.models import Crawl, CrawlFile, CrawlOrigin, Org
from tests.test_import import warc_record

BIG = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + (1 << 20)


def page_warc(text: str) -> bytes:
    http = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html><head><title>Uploaded"
            b"</title></head><body>" + text.encode() + b"</body></html>")
    head = (f"WARC/1.0\r\nWARC-Type: response\r\nWARC-Target-URI: http://upload.test/\r\n"
            f"WARC-Date: 2026-12-01T10:00:00Z\r\nWARC-Record-ID: <urn:uuid:2>\r\n"
            f"Content-Type: application/http; msgtype=response\r\n"
            f"Content-Length: {len(http)}\r\n\r\n").encode()
    return head + http + b"\r\n\r\n"


def test_an_archive_past_the_body_cap_is_streamed_and_imported(client, api_db):
    body = page_warc("quinces and pomegranates") + warc_record(b"x" * BIG)
    response = client.post("/api/v1/imports", content=body,
                           headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 201, response.text[:500]
    answer = response.json()
    crawl = Crawl.objects.get(pk=answer["crawl"]["id"])
    assert (crawl.origin, answer["pages"]) == (CrawlOrigin.IMPORT, 1)
    (kept,) = answer["files"]
    assert (api_db.data_dir / kept["path"]).stat().st_size == kept["size"]
    assert list((api_db.data_dir / "imports").iterdir()) == []


@pytest.mark.parametrize(("body", "status", "said"), [
    (gzip.compress(warc_record(b"x" * 5000))[:-30], 422, "the upload: its gzip is cut short"),
    (b"<html>not an archive</html>", 422, "not a WARC, WARC.gz or WACZ"),
])
def test_a_hostile_upload_is_refused_and_nothing_is_left(client, api_db, body, status, said):
    before = kept_folders(api_db.data_dir)
    response = client.post("/api/v1/imports", content=body)
    assert response.status_code == status, response.text[:500]
    assert said in response.json()["message"]
    assert_nothing_left(api_db.data_dir, before)


def test_an_upload_over_the_orgs_quota_is_refused_before_it_is_read(client, api_db):
    Org.objects.filter(slug="default").update(storage_quota_bytes=1000)
    before = kept_folders(api_db.data_dir)
    response = client.post("/api/v1/imports", content=warc_record(b"x" * 5000))
    assert response.status_code == 413, response.text[:500]
    assert "storage quota" in response.json()["message"]
    assert_nothing_left(api_db.data_dir, before)


def kept_folders(data_dir) -> set:
    """archives/ of the session's server (other tests' imports stay in it)."""
    archives = data_dir / "archives"
    return set(archives.iterdir()) if archives.exists() else set()


def assert_nothing_left(data_dir, before: set) -> None:
    assert not Crawl.objects.exists() and not CrawlFile.objects.exists()
    imports = data_dir / "imports"
    assert not imports.exists() or list(imports.iterdir()) == []
    assert kept_folders(data_dir) == before

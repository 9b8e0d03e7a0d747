"""/files: metadata, and downloads with Range through gunicorn (bytes, 206, 416, headers)."""

from __future__ import annotations

import os

import pytest

from crawls.api.routes_files import Unsatisfiable, byte_range
from crawls.models import CrawlFile, CrawlStatus

BODY = bytes(range(256)) * 1200  # 307,200 bytes: more than one read chunk


@pytest.fixture
def archive(api_server, make_crawl):
    crawl = make_crawl(CrawlStatus.COMPLETE)
    folder = api_server.data_dir / "archives" / crawl.id
    folder.mkdir(parents=True)
    (folder / f"{crawl.id}.wacz").write_bytes(BODY)
    return CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/{crawl.id}.wacz",
                                    size=len(BODY), sha256="0" * 64)


def test_a_whole_download_is_200_with_type_length_and_accept_ranges(client, archive):
    response = client.get(f"/api/v1/files/{archive.pk}/download")
    assert response.status_code == 200
    assert response.content == BODY
    assert response.headers["Content-Type"] == "application/wacz"
    assert response.headers["Content-Length"] == str(len(BODY))
    assert response.headers["Accept-Ranges"] == "bytes"
    assert "Content-Range" not in response.headers


@pytest.mark.parametrize(("header", "first", "last"), [
    ("bytes=0-0", 0, 0),
    ("bytes=100-299999", 100, 299999),
    ("bytes=300000-", 300000, len(BODY) - 1),
    ("bytes=-1000", len(BODY) - 1000, len(BODY) - 1),
    ("bytes=307100-999999999", 307100, len(BODY) - 1),
    ("bytes=-999999999", 0, len(BODY) - 1),
])
def test_a_range_is_206_with_exactly_those_bytes(client, archive, header, first, last):
    response = client.get(f"/api/v1/files/{archive.pk}/download", headers={"Range": header})
    assert response.status_code == 206
    assert response.content == BODY[first:last + 1]
    assert response.headers["Content-Range"] == f"bytes {first}-{last}/{len(BODY)}"
    assert response.headers["Content-Length"] == str(last - first + 1)
    assert response.headers["Content-Type"] == "application/wacz"


@pytest.mark.parametrize("header", ["bytes=307200-", "bytes=999999-1000000", "bytes=-0"])
def test_a_range_past_the_end_is_416_with_the_size(client, archive, header):
    response = client.get(f"/api/v1/files/{archive.pk}/download", headers={"Range": header})
    assert response.status_code == 416
    assert response.headers["Content-Range"] == f"bytes */{len(BODY)}"
    assert response.json()["code"] == "range_not_satisfiable"


@pytest.mark.parametrize("header", ["bytes=5-1", "bytes=0-1,5-6", "items=0-5", "bytes=-", "bytes=x-"])
def test_a_range_that_cannot_be_read_is_ignored(client, archive, header):
    response = client.get(f"/api/v1/files/{archive.pk}/download", headers={"Range": header})
    assert response.status_code == 200 and response.content == BODY


def test_metadata_and_a_crawls_file_list(client, archive):
    meta = client.get(f"/api/v1/files/{archive.pk}").json()
    assert meta["size"] == len(BODY) and meta["crawl"] == archive.crawl_id
    listed = client.get(f"/api/v1/crawls/{archive.crawl_id}/files").json()
    assert [f["id"] for f in listed] == [archive.pk]
    assert client.get("/api/v1/files/999999").json() == {"code": "not_found", "message": "no file 999999"}


def test_a_file_missing_or_behind_a_symbolic_link_is_not_served(api_server, client, archive, tmp_path):
    path = api_server.data_dir / archive.path
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    path.unlink()
    missing = client.get(f"/api/v1/files/{archive.pk}/download")
    assert missing.status_code == 404 and "is not on disk" in missing.json()["message"]
    os.symlink(outside, path)
    linked = client.get(f"/api/v1/files/{archive.pk}/download")
    assert linked.status_code == 404 and "not yours" not in linked.text
    CrawlFile.objects.filter(pk=archive.pk).update(path="../../etc/hostname")
    assert client.get(f"/api/v1/files/{archive.pk}/download").status_code == 404


def test_the_range_parser_rules():
    assert byte_range(None, 10) is None
    assert byte_range("bytes=2-4", 10) == (2, 4)
    assert byte_range("bytes=8-", 10) == (8, 9)
    assert byte_range("bytes=-3", 10) == (7, 9)
    with pytest.raises(Unsatisfiable):
        byte_range("bytes=0-", 0)
    with pytest.raises(Unsatisfiable):
        byte_range("bytes=-5", 0)

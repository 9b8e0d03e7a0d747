"""Malformed requests through gunicorn: each is a JSON 4xx in the API's error shape, never
Django's HTML 500, and changes nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from crawls.models import Crawl, CrawlFile, CrawlStatus, Org, Schedule, Webhook

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"seeds": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize("body", [DEEP, DEEP_OBJECT], ids=["array", "in-an-object"])
@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/crawls"), ("POST", "/api/v1/schedules"), ("PUT", "/api/v1/orgs/acme"),
    ("POST", "/api/v1/webhooks"), ("POST", "/api/v1/crawls/{crawl}/scale"),
    ("POST", "/api/v1/crawls/{crawl}/exclusions"),
])
def test_json_nested_100000_deep_is_a_json_400(client, make_crawl, method, path, body):
    crawl = make_crawl()
    response = client.request(method, path.format(crawl=crawl.id), content=body,
                              headers={"Content-Type": "application/json", "Idempotency-Key": "deep"})
    assert response.status_code == 400, response.text
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json()["code"] == "bad_request"
    assert Crawl.objects.count() == 1 and not Schedule.objects.exists() and not Webhook.objects.exists()
    assert not Org.objects.filter(slug="acme").exists()


@pytest.fixture
def archive(api_server, make_crawl):
    crawl = make_crawl(CrawlStatus.COMPLETE)
    folder = api_server.data_dir / "archives" / crawl.id
    folder.mkdir(parents=True)
    (folder / "a.wacz").write_bytes(b"w" * 1000)
    return CrawlFile.objects.create(crawl=crawl, path=f"archives/{crawl.id}/a.wacz", size=1000, sha256="0" * 64)


def test_a_range_starting_at_a_5000_digit_byte_is_a_json_416(client, archive):
    response = client.get(f"/api/v1/files/{archive.pk}/download", headers={"Range": "bytes=" + "9" * 5000 + "-"})
    assert response.status_code == 416
    assert response.headers["Content-Range"] == "bytes */1000"
    assert response.json()["code"] == "range_not_satisfiable"


@pytest.mark.parametrize("header", ["bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000])
def test_a_range_ending_past_any_file_is_the_whole_file(client, archive, header):
    response = client.get(f"/api/v1/files/{archive.pk}/download", headers={"Range": header})
    assert response.status_code == 206
    assert response.headers["Content-Range"] == "bytes 0-999/1000"
    assert response.content == b"w" * 1000


def test_a_crawl_whose_stored_config_is_a_list_fails_only_itself(client, make_crawl):
    now = timezone.now()
    older, damaged, newer = (make_crawl(url=f"https://{name}.example/", created_at=now + dt.timedelta(seconds=n))
                             for n, name in enumerate(("older", "damaged", "newer")))
    Crawl.objects.filter(pk=damaged.pk).update(config=["not", "a", "config"])
    listed = client.get("/api/v1/crawls")
    assert listed.status_code == 200
    page = listed.json()
    assert [item["id"] for item in page["items"]] == [newer.id, older.id]
    assert page["errors"] == [{"id": damaged.id, "code": "damaged_row", "message":
                               f"crawl {damaged.id} cannot be shown: its stored data is damaged "
                               "(AttributeError); see the server's log"}]
    alone = client.get(f"/api/v1/crawls/{damaged.id}")
    assert alone.status_code == 500 and alone.json()["code"] == "damaged_row"
    assert client.get(f"/api/v1/crawls/{newer.id}").status_code == 200

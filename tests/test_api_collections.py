"""/api/v1/collections: the CLI's collection subcommands over HTTP, scoped to the token's
org: a token never sees, changes or downloads another org's collections (through the test
client: the endpoints' auth is the API's, tested under gunicorn in test_auth.py)."""

from __future__ import annotations

import hashlib

import pytest
from django.contrib.auth.models import User

from crawls import actions
from crawls.config import CrawlConfig
from crawls.models import ApiToken, Collection, Crawl, CrawlFile, CrawlStatus, Org

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(admin_settings, conf_data_dir):
    a = Org.objects.get_or_create(slug="a")[0]
    b = Org.objects.get_or_create(slug="b")[0]
    crawls = {}
    for org in (a, b):
        crawl = Crawl.create(org, CrawlConfig(seeds=[f"http://{org.slug}.test/"]))
        Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
        body = f"wacz of {org.slug}".encode() * 100
        relative = f"archives/{crawl.id}/x.wacz"
        (conf_data_dir / relative).parent.mkdir(parents=True)
        (conf_data_dir / relative).write_bytes(body)
        CrawlFile.objects.create(crawl=crawl, path=relative, size=len(body), sha256=hashlib.sha256(body).hexdigest())
        crawls[org.slug] = crawl
    theirs = actions.create_collection(b, "Theirs")
    actions.add_to_collection(theirs, [crawls["b"]])
    user = User.objects.create_superuser("root")
    _, secret = ApiToken.issue(user, "a's", org=a)
    _, everything = ApiToken.issue(user, "all")
    return {"a": a, "crawls": crawls, "theirs": theirs,
            "auth": {"Authorization": f"Bearer {secret}"}, "root": {"Authorization": f"Bearer {everything}"}}


def test_a_token_creates_fills_shows_and_deletes_its_orgs_collection(client, world):
    created = client.post("/api/v1/collections", {"name": "Ours", "description": "d"},
                          content_type="application/json", headers=world["auth"])
    assert created.status_code == 201, created.content
    pk = created.json()["collection"]["id"]
    assert created.json()["collection"]["org"] == "a"
    crawl = world["crawls"]["a"]
    added = client.post(f"/api/v1/collections/{pk}/crawls", {"crawls": [crawl.id[:10]]},
                        content_type="application/json", headers=world["auth"])
    assert added.status_code == 200 and added.json()["collection"]["crawls"] == [crawl.id]
    assert client.get(f"/api/v1/collections/{pk}", headers=world["auth"]).json()["name"] == "Ours"
    zipped = client.get(f"/api/v1/collections/{pk}/download", headers={**world["auth"], "Range": "bytes=0-3"})
    assert zipped.status_code == 206 and b"".join(zipped.streaming_content) == b"PK\x03\x04"
    removed = client.delete(f"/api/v1/collections/{pk}/crawls/{crawl.id}", headers=world["auth"])
    assert removed.json()["collection"]["crawls"] == []
    assert client.delete(f"/api/v1/collections/{pk}", headers=world["auth"]).status_code == 200
    assert not Collection.objects.filter(pk=pk).exists()


def test_a_token_never_sees_another_orgs_collections_or_crawls(client, world):
    theirs = world["theirs"].pk
    assert client.get("/api/v1/collections", headers=world["auth"]).json() == []
    for method, path in (("get", f"/api/v1/collections/{theirs}"), ("get", f"/api/v1/collections/{theirs}/download"),
                         ("delete", f"/api/v1/collections/{theirs}"),
                         ("delete", f"/api/v1/collections/{theirs}/crawls/{world['crawls']['b'].id}")):
        response = getattr(client, method)(path, headers=world["auth"])
        assert response.status_code == 404, path
    ours = actions.create_collection(world["a"], "Ours")
    sneaky = client.post(f"/api/v1/collections/{ours.pk}/crawls", {"crawls": [world["crawls"]["b"].id]},
                         content_type="application/json", headers=world["auth"])
    assert sneaky.status_code == 404 and ours.crawls.count() == 0
    assert Collection.objects.filter(pk=theirs).exists()


def test_an_unscoped_token_is_refused_a_crawl_of_another_org_and_a_duplicate_name(client, world):
    ours = actions.create_collection(world["a"], "Ours")
    mixed = client.post(f"/api/v1/collections/{ours.pk}/crawls", {"crawls": [world["crawls"]["b"].id]},
                        content_type="application/json", headers=world["root"])
    assert mixed.status_code == 422 and "is not of org a" in mixed.json()["message"]
    twice = client.post("/api/v1/collections", {"name": "ours", "org": "a"},
                        content_type="application/json", headers=world["root"])
    assert twice.status_code == 422 and "already has a collection" in twice.json()["message"]
    listed = client.get("/api/v1/collections", headers=world["root"]).json()
    assert {c["name"] for c in listed} == {"Ours", "Theirs"}

"""Collections (issue 24): the model and its actions, the CLI, the replay origin's views of a
collection (replay.json, archives with Range, a public link that reaches nothing else), the
multi-WACZ download (layout, hashes, Range) and `/web/` resolution.

The API's org isolation: tests/test_api_collections.py. A real crawl's WACZs replayed in
Chromium are not tested yet (see the branch's report).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import time
import zipfile

import pytest
from django.core.management import CommandError, call_command

from archiver import replay_settings
from archiver.errors import ActionRefused
from crawls import actions, capability, wayback
from crawls.config import CrawlConfig
from crawls.models import Collection, Crawl, CrawlFile, CrawlStatus, Org, Snapshot

pytestmark = pytest.mark.django_db
REPLAY = "http://127.0.0.2:8090"


def org_named(slug: str) -> Org:
    return Org.objects.get_or_create(slug=slug, defaults={"name": slug})[0]


def kept_crawl(org: Org, data_dir, seed: str, body: bytes, pages=()) -> Crawl:
    """A complete crawl with one WACZ of `body` on disk and Snapshot rows for `pages` [(url, when)]."""
    crawl = Crawl.create(org, CrawlConfig(seeds=[seed]))
    Crawl.objects.filter(pk=crawl.pk).update(status=CrawlStatus.COMPLETE)
    relative = f"archives/{crawl.id}/data.wacz"
    (data_dir / relative).parent.mkdir(parents=True, exist_ok=True)
    (data_dir / relative).write_bytes(body)
    CrawlFile.objects.create(crawl=crawl, path=relative, size=len(body), sha256=hashlib.sha256(body).hexdigest())
    for url, when in pages:
        Snapshot.objects.create(crawl=crawl, url=url, captured_at=when, filename="data.wacz", title=url)
    crawl.refresh_from_db()
    return crawl


@pytest.fixture
def two(conf_data_dir):
    """A collection of two crawls of org `a`, and a crawl of org `b`."""
    a, b = org_named("a"), org_named("b")
    day = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)
    first = kept_crawl(a, conf_data_dir, "http://one.test/", b"first wacz " * 500,
                       [("http://one.test/", day), ("http://both.test/", day)])
    second = kept_crawl(a, conf_data_dir, "http://two.test/", b"second wacz " * 700,
                        [("http://two.test/", day + dt.timedelta(days=10)),
                         ("http://both.test/", day + dt.timedelta(days=10))])
    other = kept_crawl(b, conf_data_dir, "http://b.test/", b"other org",
                       [("http://both.test/", day), ("http://b.test/", day)])
    collection = actions.create_collection(a, "Spring sites", "two crawls")
    actions.add_to_collection(collection, [first, second])
    return collection, first, second, other


@pytest.fixture
def replay_client(settings, client):
    settings.ROOT_URLCONF = replay_settings.ROOT_URLCONF
    for name in ("MIDDLEWARE", "SECURE_REFERRER_POLICY"):
        setattr(settings, name, getattr(replay_settings, name))
    return client


# --- model and actions ---------------------------------------------------------------------


def test_a_crawl_may_be_in_several_collections_of_its_org(two):
    collection, first, second, other = two
    more = actions.create_collection(collection.org, "Also")
    actions.add_to_collection(more, [first])
    assert set(first.collections.values_list("name", flat=True)) == {"Spring sites", "Also"}
    assert collection.slug == "spring-sites"


def test_a_crawl_of_another_org_is_refused_and_nothing_changes(two):
    collection, first, second, other = two
    with pytest.raises(ActionRefused, match=f"crawl {other.short_id} is not of org a") as refused:
        actions.add_to_collection(collection, [first, other])
    assert refused.value.kind == ActionRefused.INVALID
    assert set(collection.crawls.all()) == {first, second}


def test_names_are_unique_per_org_and_must_hold_a_letter(two):
    collection = two[0]
    with pytest.raises(ActionRefused, match="already has a collection"):
        actions.create_collection(collection.org, "spring SITES")
    with pytest.raises(ActionRefused, match="name has 1 to 100"):
        actions.create_collection(collection.org, " -- ")
    assert actions.create_collection(org_named("b"), "Spring sites").org.slug == "b"


def test_removing_a_crawl_not_in_it_and_an_unknown_name_are_refused(two):
    collection, first, second, other = two
    with pytest.raises(ActionRefused, match="is not in collection"):
        actions.remove_from_collection(collection, [other])
    with pytest.raises(ActionRefused, match="no collection 'nope'"):
        actions.find_collection(Collection.objects.all(), "nope")


def test_a_public_link_is_kept_only_as_a_hash_and_a_new_one_replaces_it(two):
    collection = two[0]
    old = actions.open_collection_link(collection)
    new = actions.open_collection_link(collection)
    stored = Collection.objects.get(pk=collection.pk).link_hash
    assert stored == hashlib.sha256(new.encode()).hexdigest() and new not in stored
    assert Collection.by_link(old) is None and Collection.by_link(new) == collection
    actions.close_collection_link(collection)
    assert Collection.by_link(new) is None
    with pytest.raises(ActionRefused, match="has no public link"):
        actions.close_collection_link(collection)


# --- the CLI -------------------------------------------------------------------------------


def run(*args) -> str:
    out = io.StringIO()
    call_command("collection", *args, stdout=out)
    return out.getvalue()


def test_the_cli_creates_fills_shows_lists_links_and_deletes(two):
    collection, first, second, other = two
    assert "created collection 'News'" in run("create", "News", "--org", "a", "--description", "d")
    assert "added 2 crawl(s)" in run("add", "News", first.id[:8], second.id[:8], "--org", "a")
    assert first.short_id in run("show", "news", "--org", "a")
    listed = run("list", "--org", "a")
    assert "News" in listed and "Spring sites" in listed
    assert json.loads(run("show", "News", "--org", "a", "--json"))["crawls"] == sorted([first.id, second.id])
    assert "removed 1 crawl(s)" in run("remove", "News", first.id, "--org", "a")
    link = run("link", "News", "--org", "a").splitlines()[-1]
    assert link.startswith(f"{REPLAY}/c/pub_")
    assert Collection.by_link(link.removeprefix(f"{REPLAY}/c/").rstrip("/")).name == "News"
    assert "revoked" in run("link", "News", "--org", "a", "--revoke")
    assert "deleted collection 'News'" in run("delete", "News", "--org", "a")
    assert Crawl.objects.filter(pk=first.pk).exists()


def test_the_cli_refuses_another_orgs_crawl_and_unknown_names_in_one_line(two):
    collection, first, second, other = two
    with pytest.raises(CommandError, match="is not of org a"):
        run("add", "Spring sites", other.id, "--org", "a")
    with pytest.raises(CommandError, match="no collection 'x'"):
        run("show", "x", "--org", "a")
    with pytest.raises(CommandError, match="no org 'zz'"):
        run("list", "--org", "zz")


# --- replay on the replay origin -----------------------------------------------------------


def test_replay_json_lists_every_member_archive_and_its_pages(replay_client, two):
    collection, first, second, other = two
    token = capability.mint_collection(collection.pk, time.time())
    body = replay_client.get(f"/c/{token}/replay.json").json()
    assert [r["crawlId"] for r in body["resources"]] == sorted([first.id, second.id])
    resource = body["resources"][0]
    assert set(resource) == {"name", "path", "hash", "size", "crawlId"}
    assert resource["path"].startswith(f"{REPLAY}/c/{token}/files/")
    assert {p["url"] for p in body["initialPages"]} == {"http://one.test/", "http://two.test/", "http://both.test/"}
    page = replay_client.get(f"/c/{token}/").content.decode()
    assert f'source="{REPLAY}/c/{token}/replay.json"' in page


def test_replay_json_names_its_pages_query_and_each_page_names_its_member_archive(replay_client, two):
    collection, first, second, other = two
    token = capability.mint_collection(collection.pk, time.time())
    body = replay_client.get(f"/c/{token}/replay.json").json()
    assert body["pagesQueryUrl"] == f"{REPLAY}/c/{token}/pages" and body["totalPages"] == 4
    names = {r["crawlId"]: r["name"] for r in body["resources"]}
    assert {(p["crawl_id"], p["filename"]) for p in body["initialPages"]} == set(names.items())


def test_the_pages_query_finds_a_collections_pages_by_address_or_title_and_pages_them(replay_client, two):
    collection, first, second, other = two
    token = capability.mint_collection(collection.pk, time.time())
    Snapshot.objects.filter(crawl=second, url="http://two.test/").update(title="Spring fair")

    def query(**params):
        answer = replay_client.get(f"/c/{token}/pages", params)
        assert answer.status_code == 200, answer.content
        return answer.json()

    exact = query(url="http://both.test/")
    assert exact["total"] == 2 and {p["crawl_id"] for p in exact["items"]} == {first.id, second.id}
    assert {p["filename"] for p in exact["items"]} == {f"{first.id}-data.wacz", f"{second.id}-data.wacz"}
    assert exact["items"][0]["ts"] < exact["items"][1]["ts"]
    assert [p["url"] for p in query(search="fair")["items"]] == ["http://two.test/"]
    assert [p["url"] for p in query(search="http://two")["items"]] == ["http://two.test/"]
    everything = query(pageSize=3)
    assert (everything["total"], len(everything["items"]), everything["page"], everything["pageSize"]) == (4, 3, 1, 3)
    assert [p["url"] for p in query(page=2, pageSize=3)["items"]] == ["http://two.test/"]
    assert query(search="b.test")["items"] == []  # org b's page is not in the collection
    assert replay_client.get(f"/c/{token}/pages", {"pageSize": "x"}).status_code == 400
    assert replay_client.get(f"/c/{token}/pages", {"page": "0"}).status_code == 400


def test_the_pages_query_answers_a_public_link_and_no_crawl_capability(replay_client, two):
    collection, first, second, other = two
    secret = actions.open_collection_link(collection)
    assert replay_client.get(f"/c/{secret}/pages", {"url": "http://one.test/"}).json()["total"] == 1
    assert replay_client.get(f"/c/{capability.mint(first.id, time.time())}/pages").status_code == 403
    assert replay_client.post(f"/c/{secret}/pages").status_code == 405
    actions.close_collection_link(collection)
    assert replay_client.get(f"/c/{secret}/pages").status_code == 404


def test_member_archives_are_served_with_range_and_no_other_file(replay_client, two, conf_data_dir):
    collection, first, second, other = two
    token = capability.mint_collection(collection.pk, time.time())
    wanted = second.files.get()
    part = replay_client.get(f"/c/{token}/files/{wanted.pk}/data.wacz", headers={"Range": "bytes=7-20"})
    assert part.status_code == 206 and part["Content-Range"] == f"bytes 7-20/{wanted.size}"
    assert b"".join(part.streaming_content) == (b"second wacz " * 700)[7:21]
    part.close()
    assert replay_client.get(f"/c/{token}/files/{other.files.get().pk}/data.wacz").status_code == 404


def test_a_collection_capability_is_not_a_crawl_capability_nor_the_reverse(replay_client, two):
    collection, first, second, other = two
    crawl_token = capability.mint(first.id, time.time())
    assert replay_client.get(f"/c/{crawl_token}/web/*/http://one.test/").status_code == 403
    with pytest.raises(capability.Refused):
        capability.collection_of(crawl_token, time.time())
    expired = capability.mint_collection(collection.pk, time.time() - 2 * capability.LIFETIME)
    assert replay_client.get(f"/c/{expired}/replay.json").status_code == 403


def test_a_public_link_reaches_the_replay_and_nothing_else_and_404_once_revoked(replay_client, two, admin_user):
    collection, first, second, other = two
    secret = actions.open_collection_link(collection)
    member = first.files.get()
    for path in ("", "replay.json", f"files/{member.pk}/data.wacz", "web/2026/http://one.test/"):
        response = replay_client.get(f"/c/{secret}/{path}")
        assert response.status_code in (200, 302), path
        response.close()
    replay_client.force_login(admin_user)
    for path in ("/admin/", "/api/v1/collections", f"/c/{secret}/files/{other.files.get().pk}/data.wacz",
                 f"/c/{secret}/download", f"/c/{secret}x/replay.json", "/web/2026/http://one.test/"):
        assert replay_client.get(path).status_code == 404, path
    crawl_capability = capability.mint(first.id, time.time())  # the link is no crawl capability
    assert replay_client.get(f"/c/{secret}/replay.json").json()["resources"][0]["path"].startswith(
        f"{REPLAY}/c/{secret}/") and crawl_capability not in secret
    actions.close_collection_link(collection)
    for path in ("", "replay.json", f"files/{member.pk}/data.wacz"):
        assert replay_client.get(f"/c/{secret}/{path}").status_code == 404


# --- /web/ -------------------------------------------------------------------------------------


def test_timestamps_are_14_digits_or_a_prefix():
    assert wayback.parse_timestamp("2026") == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert wayback.parse_timestamp("20260512") == dt.datetime(2026, 5, 12, tzinfo=dt.UTC)
    assert wayback.parse_timestamp("20260512134501") == dt.datetime(2026, 5, 12, 13, 45, 1, tzinfo=dt.UTC)
    for bad in ("20261301", "26", "2026x", "2" * 15):
        with pytest.raises(ValueError):
            wayback.parse_timestamp(bad)


def test_web_opens_the_capture_nearest_the_timestamp(replay_client, two):
    collection, first, second, other = two
    secret = actions.open_collection_link(collection)
    early = replay_client.get(f"/c/{secret}/web/20260502/http://both.test/")
    assert early.status_code == 302
    assert early["Location"] == f"{REPLAY}/c/{secret}/?url=http%3A%2F%2Fboth.test%2F&ts=20260501120000"
    late = replay_client.get(f"/c/{secret}/web/20260509/http://both.test/")
    assert late["Location"].endswith("ts=20260511120000")
    folded = replay_client.get(f"/c/{secret}/web/2027/http:/both.test")  # `//` folded, no slash
    assert folded["Location"].endswith("ts=20260511120000")
    assert replay_client.get(f"/c/{secret}/web/2026/http://b.test/").status_code == 404  # another org's
    unknown = replay_client.get(f"/c/{secret}/web/2026/http://nowhere.test/")
    assert unknown.status_code == 404
    assert replay_client.get(f"/c/{secret}/web/20261399/http://both.test/").status_code == 400


def test_web_star_lists_every_capture(replay_client, two):
    collection = two[0]
    secret = actions.open_collection_link(collection)
    html = replay_client.get(f"/c/{secret}/web/*/http://both.test/").content.decode()
    assert html.count("<tr><td>") == 2 and "2026-05-01 12:00:00" in html and "2026-05-11 12:00:00" in html
    assert f"/c/{secret}/web/20260511120000/http://both.test/" in html


def test_staffs_web_opens_the_crawls_replay_page_across_orgs(admin_settings, client, admin_user, two):
    collection, first, second, other = two
    client.force_login(admin_user)
    response = client.get("/web/20260501/http://b.test/")
    assert response.status_code == 302
    assert response["Location"] == f"/admin/crawls/crawl/{other.pk}/replay/?url=http%3A%2F%2Fb.test%2F&ts=20260501120000"
    assert client.get("/web/2026/http://nowhere.test/").status_code == 404
    client.logout()
    assert client.get("/web/2026/http://b.test/").status_code == 302  # to the log-in page
    assert "/admin/login/" in client.get("/web/2026/http://b.test/")["Location"]


def not_archived_page(answer) -> str:
    html = answer.content.decode()
    assert answer.status_code == 404 and "http://nowhere.test/ was not archived here" in html
    assert '<meta name="viewport"' in html and "Not Found" not in html  # not Django's generic page
    return html


def test_a_collections_web_says_in_a_styled_page_that_a_url_was_not_archived_here(replay_client, two):
    secret = actions.open_collection_link(two[0])
    for stamp in ("2026", "*"):
        assert "<style>" in not_archived_page(replay_client.get(f"/c/{secret}/web/{stamp}/http://nowhere.test/"))


def test_staffs_web_says_in_an_admin_page_that_a_url_was_not_archived_here(admin_settings, client, admin_user, two):
    client.force_login(admin_user)
    for stamp in ("2026", "*"):
        assert 'class="web-message"' in not_archived_page(client.get(f"/web/{stamp}/http://nowhere.test/"))
    bad = client.get("/web/20261399/http://both.test/")
    assert bad.status_code == 400 and "is not a valid date and time" in bad.content.decode()


def test_staffs_capture_list_is_an_admin_page_whose_crawl_ids_are_links(admin_settings, client, admin_user, two):
    collection, first, second, other = two
    client.force_login(admin_user)
    html = client.get("/web/*/http://both.test/").content.decode()
    assert '<meta name="viewport"' in html and 'class="crawl-table web-captures"' in html
    for crawl in (first, second):
        assert f'<a href="/admin/crawls/crawl/{crawl.pk}/change/">{crawl.short_id}</a>' in html


def test_a_collections_capture_list_has_a_viewport_and_a_style(replay_client, two):
    secret = actions.open_collection_link(two[0])
    html = replay_client.get(f"/c/{secret}/web/*/http://both.test/").content.decode()
    assert '<meta name="viewport"' in html and "<style>" in html
    assert "/admin/" not in html  # a public link's reader has no admin to go to


# --- the download -----------------------------------------------------------------------------


def download(client, collection, **headers):
    response = client.get(f"/admin/crawls/collection/{collection.pk}/download/", headers=headers)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def test_the_download_is_a_stored_zip_with_a_multi_wacz_datapackage(admin_settings, client, admin_user, two):
    collection, first, second, other = two
    client.force_login(admin_user)
    response, body = download(client, collection)
    assert response.status_code == 200 and int(response["Content-Length"]) == len(body)
    assert response["Content-Disposition"] == 'attachment; filename="spring-sites.zip"'
    package = zipfile.ZipFile(io.BytesIO(body))
    assert package.testzip() is None
    assert all(info.compress_type == zipfile.ZIP_STORED for info in package.infolist())
    meta = json.loads(package.read("datapackage.json"))
    assert meta["profile"] == "multi-wacz-package"
    for resource in meta["resources"]:
        data = package.read(resource["path"])
        assert resource["hash"] == f"sha256:{hashlib.sha256(data).hexdigest()}"
        assert resource["bytes"] == len(data)
    assert {r["crawlId"] for r in meta["resources"]} == {first.id, second.id}


def test_the_download_answers_ranges_from_a_stable_layout(admin_settings, client, admin_user, two):
    collection = two[0]
    client.force_login(admin_user)
    _, whole = download(client, collection)
    assert CrawlFile.objects.filter(crc32__isnull=True, crawl__collections=collection).count() == 0
    for first, last in ((0, 99), (30, 5000), (len(whole) - 50, len(whole) - 1)):
        part, body = download(client, collection, Range=f"bytes={first}-{last}")
        assert part.status_code == 206 and body == whole[first:last + 1]
        assert part["Content-Range"] == f"bytes {first}-{last}/{len(whole)}"
    tail, body = download(client, collection, Range="bytes=-10")
    assert body == whole[-10:]
    assert download(client, collection, Range=f"bytes={len(whole)}-")[0].status_code == 416


def test_the_admin_replays_a_collection_and_a_crawl_in_one_frame_template(admin_settings, client, admin_user, two):
    collection, first, second, other = two
    client.force_login(admin_user)
    page = client.get(f"/admin/crawls/collection/{collection.pk}/replay/?url=http://one.test/").content.decode()
    assert 'title="Replay of collection Spring sites"' in page
    assert f'href="/admin/crawls/collection/{collection.pk}/change/">Spring sites</a>' in page
    assert f'src="{REPLAY}/c/' in page and "?url=http%3A%2F%2Fone.test%2F" in page
    crawl_page = client.get(f"/admin/crawls/crawl/{first.pk}/replay/").content.decode()
    assert f'title="Replay of crawl {first.short_id}"' in crawl_page
    assert f"/admin/crawls/collection/{collection.pk}/change/" not in crawl_page

"""A collection's public link serves only what its crawls hold (issue 36). A member
deduplicated against an archive outside the collection gets, in that archive's place, an
excerpt of it: a small WACZ with only the records whose payloads the members' revisits name,
under the name the member requires. The outside archive itself (a private crawl's, with its
secret text) is reachable neither through the link's archive route, nor its replay.json,
nor the collection's download."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib

import pytest
import redis
from archiver_crawler.dedup import KnownPayloads
from archiver_crawler.warc import Exchange
from django.utils import timezone

from archiver import conf
from crawls import actions, collection_files, dedup, retention
from crawls.models import Collection, CrawlFile
from tests.test_collections import REPLAY, replay_client  # noqa: F401 - a fixture
from tests.test_dedup import WHEN, finished_crawl, kept_wacz, read_package

pytestmark = pytest.mark.django_db
SECRET = b"The private crawl's secret: the vault opens with 4471"
IMAGE = b"GIF89a the image both crawls embed"
NEWS = b"Public news of the day"


def plain(data: bytes) -> bytes:
    """Everything `data` holds, unpacked: a zip's members and gzip members, recursively."""
    if data[:2] == b"PK":
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return b"\n".join(plain(zf.read(name)) for name in zf.namelist())
    if data[:2] == b"\x1f\x8b":
        out, rest = [], data
        while rest:
            unzip = zlib.decompressobj(31)
            out.append(unzip.decompress(rest))
            rest = unzip.unused_data
        return b"".join(out)
    return data


@pytest.fixture
def shared_image(conf_data_dir, redis_url):
    """A private crawl kept and indexed; a public crawl deduplicated against it (one image
    alike), alone in a collection with a public link."""
    return sharing(conf_data_dir, redis_url, IMAGE)


def sharing(conf_data_dir, redis_url, image: bytes | Exchange):
    private, public = finished_crawl(), finished_crawl()
    private_file = kept_wacz(conf_data_dir, private, {"http://x/vault": SECRET, "http://x/logo.gif": image,
                                                      "http://x/vault/copy.gif": IMAGE})
    assert dedup.index_pending(conf.get()) == 1
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    dedup.hand_to_crawler(client, public)
    known = KnownPayloads(client.hgetall(f"{public.pk}:dedup"), client.hgetall(f"{public.pk}:dedup:files"),
                          conf_data_dir / "work" / public.pk / "collections" / "coll")
    client.delete(f"{public.pk}:dedup", f"{public.pk}:dedup:files")
    client.close()
    public_file = kept_wacz(conf_data_dir, public, {"http://x/news": NEWS, "http://x/logo.gif": IMAGE}, known)
    assert dedup.index_pending(conf.get()) == 1
    assert public_file.requires_links.get().required == private_file  # the image is a revisit of the private one's
    collection = Collection.create(public.org, "Public", now=timezone.now())
    collection.add_crawls([public])
    return collection, private_file, public_file


def fetched(client, url: str) -> bytes:
    response = client.get(url.removeprefix(REPLAY))
    assert response.status_code == 200, url
    body = b"".join(response.streaming_content) if response.streaming else response.content
    response.close()
    return body


def test_a_public_link_serves_no_archive_of_a_crawl_outside_its_collection(replay_client, shared_image):  # noqa: F811
    collection, private_file, public_file = shared_image
    link = actions.open_collection_link(collection)
    listing = replay_client.get(f"/c/{link}/replay.json")
    assert b"vault" not in listing.content
    served = [fetched(replay_client, r["path"]) for r in listing.json()["resources"]]
    served.append(fetched(replay_client, f"/c/{link}/files/{private_file.pk}/coll.wacz"))
    assert all(SECRET not in plain(body) for body in served)
    assert NEWS in plain(served[0])
    assert all(body != (conf.get().data_dir / private_file.path).read_bytes() for body in served)


def test_the_excerpt_holds_the_revisited_record_under_the_name_the_member_requires(replay_client, shared_image):  # noqa: F811
    collection, private_file, public_file = shared_image
    link = actions.open_collection_link(collection)
    resources = replay_client.get(f"/c/{link}/replay.json").json()["resources"]
    assert [r["crawlId"] for r in resources] == [public_file.crawl_id, private_file.crawl_id]
    excerpt = resources[1]
    assert excerpt["name"] == read_package(public_file)["relation"]["requires"][0]["filename"]
    body = fetched(replay_client, excerpt["path"])
    assert excerpt["hash"] == "sha256:" + hashlib.sha256(body).hexdigest()
    assert excerpt["size"] == len(body)
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}  # read by range
        index = [json.loads(line.split(" ", 2)[2]) for line in zf.read("indexes/index.cdxj").decode().splitlines()]
        # Only the address the revisit names: not the private crawl's other copy of the image.
        assert [(e["url"], e["status"]) for e in index] == [("http://x/logo.gif", "200")]
        warc = zf.read(f"archive/{index[0]['filename']}")
        record = warc[int(index[0]["offset"]):int(index[0]["offset"]) + int(index[0]["length"])]
        assert IMAGE in plain(record)
        package = json.loads(zf.read("datapackage.json"))
        for resource in package["resources"]:
            digest = hashlib.sha256(zf.read(resource["path"])).hexdigest()
            assert resource["hash"] == f"sha256:{digest}"


def test_the_collections_download_carries_the_excerpt_not_the_outside_archive(shared_image):
    collection, private_file, public_file = shared_image
    download = collection_files.package(collection)
    body = b"".join(download.read(0, download.size - 1))
    assert SECRET not in plain(body) and IMAGE in plain(body) and NEWS in plain(body)
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        package = json.loads(zf.read("datapackage.json"))
    assert package["resources"][1]["name"] == read_package(public_file)["relation"]["requires"][0]["filename"]
    assert package["resources"][1]["hash"] != f"sha256:{private_file.sha256}"


def test_a_crawl_in_the_collection_is_served_whole_even_when_another_member_requires_it(
        replay_client, shared_image):  # noqa: F811
    collection, private_file, public_file = shared_image
    collection.add_crawls([CrawlFile.objects.get(pk=private_file.pk).crawl])
    link = actions.open_collection_link(collection)
    resources = replay_client.get(f"/c/{link}/replay.json").json()["resources"]
    assert {r["hash"] for r in resources} == {f"sha256:{public_file.sha256}", f"sha256:{private_file.sha256}"}
    assert SECRET in plain(fetched(replay_client, f"/c/{link}/files/{private_file.pk}/coll.wacz"))


def test_the_excerpts_of_an_archive_go_with_it(replay_client, shared_image, conf_data_dir):  # noqa: F811
    collection, private_file, public_file = shared_image
    link = actions.open_collection_link(collection)
    assert replay_client.get(f"/c/{link}/replay.json").status_code == 200
    assert len(list((conf_data_dir / "excerpts").glob(f"{private_file.pk}-*"))) == 2  # and its description
    retention.delete_all_files(private_file.crawl, conf.get())
    assert list((conf_data_dir / "excerpts").glob(f"{private_file.pk}-*")) == []


COOKIES = (b"session=PRIVATE-SESSION-7781", b"Bearer PRIVATE-TOKEN-5512", b"PRIVATE-HEADER-3390",
           b"PRIVATE-REQUEST-COOKIE-0042")


@pytest.fixture
def cookied_image(conf_data_dir, redis_url):
    """As shared_image, but the private crawl fetched the image logged in: its request sent a
    cookie and an Authorization, and the response set a cookie and a header of the site's own."""
    image = Exchange(
        url="http://x/logo.gif", method="GET", request_target="/logo.gif", http_version="HTTP/1.1",
        request_headers=[("Host", "x"), ("Cookie", "sid=PRIVATE-REQUEST-COOKIE-0042"),
                         ("Authorization", "Bearer PRIVATE-TOKEN-5512")],
        status=200, reason="OK", body=IMAGE, date=WHEN,
        response_headers=[("Content-Type", "image/gif"), ("Set-Cookie", "session=PRIVATE-SESSION-7781"),
                          ("X-Account-Key", "PRIVATE-HEADER-3390"), ("ETag", '"v1"'),
                          ("Authorization", "Bearer PRIVATE-TOKEN-5512")])
    return sharing(conf_data_dir, redis_url, image)


def test_the_excerpt_carries_no_header_of_the_private_crawls_session(replay_client, cookied_image):  # noqa: F811
    collection, private_file, public_file = cookied_image
    private = plain((conf.get().data_dir / private_file.path).read_bytes())
    assert all(secret in private for secret in COOKIES)  # the private crawl kept them all
    link = actions.open_collection_link(collection)
    resources = replay_client.get(f"/c/{link}/replay.json").json()["resources"]
    body = fetched(replay_client, resources[1]["path"])
    download = collection_files.package(collection)
    for served in (plain(body), plain(b"".join(download.read(0, download.size - 1)))):
        assert IMAGE in served
        assert not [secret for secret in COOKIES if secret in served]
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        (line,) = zf.read("indexes/index.cdxj").decode().splitlines()
        entry = json.loads(line.split(" ", 2)[2])
        warc = zf.read(f"archive/{entry['filename']}")
    record = plain(warc[int(entry["offset"]):int(entry["offset"]) + int(entry["length"])])
    warc_head, http_head, payload = record.split(b"\r\n\r\n", 2)
    assert payload == IMAGE + b"\r\n\r\n"
    assert b"WARC-Type: response" in warc_head and b"WARC-Target-URI: http://x/logo.gif" in warc_head
    assert f"Content-Length: {len(http_head) + 4 + len(IMAGE)}".encode() in warc_head
    assert http_head.split(b"\r\n") == [b"HTTP/1.1 200 OK", b"Content-Type: image/gif", b'ETag: "v1"']
    assert set(entry) == {"url", "mime", "status", "digest", "offset", "length", "filename"}

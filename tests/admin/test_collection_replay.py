"""A collection of two real crawls — archiver's daemon and crawler (HTTP mode) archiving two
local sites (tests/sitegen.py, each on a port of its own) — replayed as one in a real Chromium
through ReplayWeb.page, which loads the collection's replay.json from the replay origin: from
the admin's Replay page and through the collection's public link. The collection's download
(the multi-WACZ package) is then checked: its datapackage.json names every member with its
bytes and hash, each member is the crawl's own archive, and each passes `wacz validate`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.admin.browsing import log_in, wait_for_replayed_text
from tests.crawler.wacz_check import WACZ, wacz_validate
from tests.sitegen import Response, serve_site

pytestmark = pytest.mark.slow
# One story per site, each found only in its own crawl's archive.
STORIES = {"one": "The keeper of the first site counted the gulls at dawn",
           "two": "In the second site's orchard the pears ripened late"}


def site_pages(name: str) -> dict[str, Response]:
    def html(title: str, body: str) -> bytes:
        return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()

    return {f"/{name}/": Response(body=html(f"Site {name}", f'<h1>Site {name}</h1><a href="story.html">story</a>')),
            f"/{name}/story.html": Response(body=html(f"Story {name}", f"<h1>{STORIES[name]}</h1>"))}


def wait_complete(installation, crawl_id: str) -> None:
    state = installation.wait(crawl_id, lambda c: c["status"] in ("complete", "failed"), timeout=180)
    assert state["status"] == "complete", state


def test_a_collection_of_two_real_crawls_replays_a_page_of_each_and_downloads_valid_members(
        installation, admin_url, replay_url, browser, shots):
    if not Path(WACZ).exists():
        pytest.fail(f"no wacz validator at {WACZ}: install the test extra (pip install -e '.[test]')")
    with serve_site(extra=site_pages("one")) as one, serve_site(extra=site_pages("two")) as two:
        installation.start_daemon()
        # Both queued at once: the daemon runs them side by side, as it would two sites' crawls.
        crawls = {name: installation.manage("add", f"{site.root}/{name}/").strip()
                  for name, site in (("one", one), ("two", two))}
        for crawl_id in crawls.values():
            wait_complete(installation, crawl_id)
        stories = {name: f"{site.root}/{name}/story.html" for name, site in (("one", one), ("two", two))}
    for name, crawl_id in crawls.items():  # each story was archived by its own crawl only
        assert installation.query("SELECT crawl_id FROM crawls_snapshot WHERE url = ? AND status = 'done'",
                                  stories[name]) == [(crawl_id,)]

    installation.manage("collection", "create", "Both")
    installation.manage("collection", "add", "Both", *crawls.values())
    collection = json.loads(installation.manage("collection", "show", "Both", "--json"))
    assert collection["crawls"] == sorted(crawls.values())

    log_in(browser, admin_url, installation)
    check_download(installation, admin_url, browser.get_cookie("sessionid")["value"], collection, crawls)
    # The sites are gone: what shows now comes from the archives.
    for name, url in stories.items():
        browser.get(f"{admin_url}/admin/crawls/collection/{collection['id']}/replay/?url={quote(url)}")
        wait_for_replayed_text(browser, shots, STORIES[name], f"collection-{name}")

    link = installation.manage("collection", "link", "Both").strip().splitlines()[-1]
    assert link.startswith(f"{replay_url}/c/pub_")
    replay = json.loads(fetch(f"{link}replay.json"))
    assert {r["crawlId"] for r in replay["resources"]} == set(crawls.values())
    browser.get(f"{link}?url={quote(stories['two'])}")
    wait_for_replayed_text(browser, shots, STORIES["two"], "collection-public-link")
    installation.manage("collection", "link", "Both", "--revoke")
    gone = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{link}replay.json"],
                          capture_output=True, text=True, timeout=30)
    assert gone.stdout == "404"


def fetch(url: str, **headers) -> bytes:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    with direct.open(urllib.request.Request(url, headers=headers), timeout=60) as answer:
        return answer.read()


def check_download(installation, admin_url: str, session: str, collection: dict, crawls: dict) -> None:
    """The admin's download of the collection, as a user gets it from gunicorn: every member is
    one of its crawls' archives byte for byte, named in datapackage.json with its bytes and
    hash, and a valid WACZ."""
    package = installation.data_dir / "collection.zip"
    package.write_bytes(fetch(f"{admin_url}/admin/crawls/collection/{collection['id']}/download/",
                              Cookie=f"sessionid={session}"))
    kept = {f"{crawl_id}/{path.name}": (path, crawl_id)
            for crawl_id in crawls.values() for path, _ in installation.files(crawl_id)}
    assert {crawl_id for _, crawl_id in kept.values()} == set(crawls.values())  # each kept an archive
    members = installation.data_dir / "members"
    with zipfile.ZipFile(package) as zipped:
        meta = json.loads(zipped.read("datapackage.json"))
        assert meta["profile"] == "multi-wacz-package"
        assert sorted(r["path"] for r in meta["resources"]) == sorted(kept)
        # The package is signed as archiver signs its archives (crawls/wacz_auth.py).
        assert sorted(zipped.namelist()) == sorted([*kept, "datapackage.json", "datapackage-digest.json"])
        for resource in meta["resources"]:
            data = zipped.read(resource["path"])
            original, crawl_id = kept[resource["path"]]
            assert resource["crawlId"] == crawl_id
            assert resource["bytes"] == len(data) and resource["hash"] == f"sha256:{hashlib.sha256(data).hexdigest()}"
            assert data == original.read_bytes()
            member = members / resource["path"]
            member.parent.mkdir(parents=True, exist_ok=True)
            member.write_bytes(data)
            checked = wacz_validate(member)
            assert checked.returncode == 0, (resource["path"], checked.stdout, checked.stderr)

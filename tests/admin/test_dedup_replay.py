"""A recrawl with deduplication replayed in the admin, in a real Chromium: the second crawl's
archive holds only revisit records for the unchanged pages, names the first crawl's archive
it depends on, and its replay still shows the unchanged page's content (ReplayWeb.page is
given both archives); so does a collection holding the recrawl alone, through its public
link."""

from __future__ import annotations

import json
import zipfile
from urllib.parse import quote

import pytest

from tests.admin.browsing import log_in, wait_for_replayed_text
from tests.admin.test_collection_replay import fetch
from tests.sitegen import Response, serve_site
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
STORY = "The keeper climbed the lighthouse stairs every night"


def pages() -> dict[str, Response]:
    def html(title: str, body: str) -> bytes:
        return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()

    return {"/dedup/": Response(body=html("News", '<h1>News</h1><a href="story.html">the story</a>')),
            "/dedup/story.html": Response(body=html("Story", f"<h1>{STORY}</h1><p>{'and on ' * 200}</p>"))}


def crawled(installation, seed: str) -> str:
    crawl_id = installation.manage("add", seed, "--dedup").strip()
    state = installation.wait(crawl_id, lambda c: c["status"] in ("complete", "failed"), timeout=180)
    assert state["status"] == "complete", state
    return crawl_id


def test_a_deduplicated_recrawl_replays_its_unchanged_page_from_the_first_archive(
        installation, admin_url, browser, shots):
    with serve_site(extra=pages()) as site:
        seed = site.root + "/dedup/"
        installation.start_daemon()
        first = crawled(installation, seed)
        # The payloads of the first archive are indexed before the recrawl starts.
        wait_for(lambda: installation.query(
            "SELECT count(*) FROM crawls_crawlfile WHERE crawl_id = ? AND payloads_indexed", first) >= [(1,)],
            timeout=60, what="the first crawl's payloads indexed")
        second = crawled(installation, seed)

    def dependencies():
        return installation.query(
            "SELECT r.path FROM crawls_filedependency d JOIN crawls_crawlfile f ON f.id = d.file_id "
            "JOIN crawls_crawlfile r ON r.id = d.required_id WHERE f.crawl_id = ?", second)

    # Recorded by the indexing pass, which may come a tick after the crawl ends.
    wait_for(dependencies, timeout=60, what="the recrawl's dependency recorded")
    (required,) = dependencies()
    assert required[0].startswith(f"archives/{first}/")
    ((path,),) = installation.query("SELECT path FROM crawls_crawlfile WHERE crawl_id = ?", second)
    with zipfile.ZipFile(installation.data_dir / path) as wacz:
        index = b"".join(wacz.read(name) for name in wacz.namelist() if name.startswith("indexes/")
                         and name.endswith(".cdxj"))
    story_lines = [line for line in index.splitlines() if b"/dedup/story.html" in line]
    assert story_lines and all(b"revisit" in line for line in story_lines), story_lines

    log_in(browser, admin_url, installation)
    browser.get(f"{admin_url}/admin/crawls/crawl/{second}/replay/?url={quote(seed + 'story.html')}")
    wait_for_replayed_text(browser, shots, STORY, "dedup-replay")

    # A collection of the recrawl alone: its replay loads the archive the recrawl requires.
    installation.manage("collection", "create", "Recrawl")
    installation.manage("collection", "add", "Recrawl", second)
    link = installation.manage("collection", "link", "Recrawl").strip().splitlines()[-1]
    replay = json.loads(fetch(f"{link}replay.json"))
    assert [r["crawlId"] for r in replay["resources"]] == [second, first]
    ((first_sha256,),) = installation.query("SELECT sha256 FROM crawls_crawlfile WHERE crawl_id = ?", first)
    assert replay["resources"][1]["hash"] != f"sha256:{first_sha256}"  # an excerpt, not the whole archive
    browser.get(f"{link}?url={quote(seed + 'story.html')}")
    wait_for_replayed_text(browser, shots, STORY, "dedup-collection-replay")

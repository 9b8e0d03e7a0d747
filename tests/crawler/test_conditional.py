"""Conditional recrawls: a crawl told the validators of what the org kept (as the runner hands
them, `<id>:dedup:urls`) sends If-None-Match / If-Modified-Since, keeps each 304 as a
`server-not-modified` revisit of the kept record, still reaches the pages only 304 pages link
to, and archives a changed page whole. Against a real server on 127.0.0.1 that honours
conditional requests."""

from __future__ import annotations

import asyncio
import json
import time
import zipfile

import pytest
from archiver_crawler.browser import find_chromium
from archiver_crawler.cli import run_instance
from archiver_crawler.config import parse_args
from archiver_crawler.dedup import NOT_MODIFIED_PROFILE, Kept, parse_kept
from warcio.archiveiterator import ArchiveIterator

from tests.conditional_site import serve_conditional
from tests.crawler.running import base_args
from tests.crawler.wacz_check import wacz_validate

KEPT_DATE = "2026-01-01T00:00:00Z"


def crawl(redis_url, cwd, crawl_id, url, *extra):
    args = base_args(url, redis_url, cwd, "--generateWACZ", "--scopeType", "prefix", *extra,
                     crawl_id=crawl_id)
    config = parse_args(args, env={"CRAWLER_HOSTNAME": f"crawl-{crawl_id}-0"})
    assert int(asyncio.run(run_instance(config))) == 0
    return cwd / "collections" / "coll"


def index(wacz) -> list[dict]:
    with zipfile.ZipFile(wacz) as zf:
        return [json.loads(line.split(" ", 2)[2])
                for line in zf.read("indexes/index.cdxj").decode().splitlines()]


def pages(wacz) -> dict[str, dict]:
    with zipfile.ZipFile(wacz) as zf:
        lines = zf.read("pages/pages.jsonl").decode().splitlines()[1:]
    return {entry["url"]: entry for entry in map(json.loads, lines)}


def hand_validators(r, crawl_id: str, kept_index: list[dict]) -> None:
    """What the runner's hand_to_crawler writes for a file "f1" holding `kept_index`."""
    r.hset(f"{crawl_id}:dedup:urls", mapping={
        e["url"]: json.dumps({"digest": e["digest"], "date": KEPT_DATE, "file": "f1",
                              "mime": e.get("mime", ""), "etag": e.get("etag", ""),
                              "lastModified": e.get("lastModified", "")})
        for e in kept_index if e.get("status") == "200"})
    r.hset(f"{crawl_id}:dedup:files", "f1", json.dumps(
        {"filename": "one.wacz", "hash": "sha256:" + "0" * 64, "crawlId": "cd1"}))


def test_a_recrawl_of_an_unchanged_site_is_answered_304_and_kept_as_revisits(r, redis_url,
                                                                           tmp_path):
    with serve_conditional(pages=30) as site:
        first = crawl(redis_url, tmp_path / "one", "cd1", site.url)
        kept_index = index(first / "coll.wacz")
        served = {e["url"]: e for e in kept_index if e.get("status") == "200"}
        assert all(e.get("etag") and e.get("lastModified") for e in served.values()), served
        hand_validators(r, "cd2", kept_index)
        site.change("/cond/p7.html", int(time.time()))
        site.reset_counts()
        second = crawl(redis_url, tmp_path / "two", "cd2", site.url, "--dedup")

    page_paths = site.pages
    asked = sum(1 for p in page_paths if site.conditional[p])
    assert asked >= 0.9 * len(page_paths), (asked, len(page_paths))
    assert sum(site.not_modified.values()) >= len(page_paths) - 1
    assert site.not_modified["/cond/style.css"] == 1  # a requisite is asked conditionally too

    revisits = {}
    for warc in sorted((second / "archive").glob("*.warc.gz")):
        with open(warc, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "revisit":
                    revisits[record.rec_headers.get_header("WARC-Target-URI")] = record.rec_headers
                    assert record.http_headers.get_statuscode() == "304"
                    assert record.http_headers.get_header("ETag")
    changed = site.root + "/cond/p7.html"
    assert set(revisits) == set(served) - {changed}
    for url, headers in revisits.items():
        assert headers.get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
        assert headers.get_header("WARC-Refers-To-Target-URI") == url
        assert headers.get_header("WARC-Refers-To-Date") == KEPT_DATE
        assert headers.get_header("WARC-Payload-Digest") is None  # a 304 has no payload

    wacz = second / "coll.wacz"
    result = wacz_validate(wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = {e["url"]: e for e in index(wacz)}
    for url in revisits:  # indexed as an identical-payload revisit is: the kept digest, 200
        assert (lines[url]["mime"], lines[url]["status"], lines[url]["digest"]) == (
            "warc/revisit", "200", served[url]["digest"])
    assert lines[changed]["mime"] == "text/html" and lines[changed]["digest"] != served[changed]["digest"]
    with zipfile.ZipFile(wacz) as zf:
        assert json.loads(zf.read("datapackage.json"))["relation"]["requires"][0]["crawlId"] == "cd1"
    listed = pages(wacz)
    # Every page is listed again, though most were 304s whose links came from the kept URLs.
    assert set(listed) == {u for u, e in served.items() if e["mime"] == "text/html"}
    assert listed[site.url] == {**listed[site.url], "status": 200, "mime": "text/html",
                                "notModified": True}
    assert "notModified" not in listed[changed]


@pytest.mark.skipif(find_chromium() is None, reason="needs a Chromium")
def test_a_browser_mode_recrawl_asks_for_kept_pages_conditionally(r, redis_url, tmp_path):
    with serve_conditional(pages=8) as site:
        first = crawl(redis_url, tmp_path / "one", "cb1", site.url)
        hand_validators(r, "cb2", index(first / "coll.wacz"))
        site.change("/cond/p2.html", int(time.time()))
        site.reset_counts()
        second = crawl(redis_url, tmp_path / "two", "cb2", site.url, "--dedup", "--browser",
                       "--pageLoadTimeout", "20")
    # The unchanged pages are 304s to the crawler's own GET and never load in Chromium; the
    # changed one is asked for conditionally, then loaded by the browser.
    assert all(site.conditional[p] == 1 for p in site.pages), site.conditional
    assert site.gets["/cond/p2.html"] == 2 and site.not_modified["/cond/p2.html"] == 0
    lines = index(second / "coll.wacz")
    revisited = {e["url"] for e in lines if e.get("mime") == "warc/revisit"}
    assert revisited == {site.root + p for p in site.pages if p != "/cond/p2.html"} | {
        site.root + "/cond/style.css"}
    assert wacz_validate(second / "coll.wacz").returncode == 0


def test_without_dedup_no_request_is_conditional(r, redis_url, tmp_path):
    with serve_conditional(pages=3) as site:
        first = crawl(redis_url, tmp_path / "one", "cd3", site.url)
        hand_validators(r, "cd4", index(first / "coll.wacz"))
        site.reset_counts()
        crawl(redis_url, tmp_path / "two", "cd4", site.url)
    assert sum(site.gets.values()) >= 4 and not sum(site.conditional.values())


def test_a_kept_entry_with_a_line_break_in_a_validator_is_no_entry():
    value = {"digest": "sha1:A", "date": KEPT_DATE, "file": "1", "etag": '"a"\r\nX-Evil: 1'}
    assert parse_kept("http://x/", json.dumps(value)) is None
    assert parse_kept("http://x/", "not json") is None
    kept = parse_kept("http://x/", json.dumps({**value, "etag": '"a"', "lastModified": "Mon"}))
    assert kept == Kept(url="http://x/", digest="sha1:A", date=KEPT_DATE, file_key="1",
                        etag='"a"', last_modified="Mon")
    assert kept.conditions() == [("If-None-Match", '"a"'), ("If-Modified-Since", "Mon")]

"""Revisit records: a second crawl of an unchanged site, told what the first one kept, writes
`revisit` records for the payloads it meets again; the WARC reads back and the WACZ validates
and names the archive it depends on."""

from __future__ import annotations

import asyncio
import json
import zipfile

import pytest
from archiver_crawler.browser import find_chromium
from archiver_crawler.cli import run_instance
from archiver_crawler.config import parse_args
from archiver_crawler.dedup import REVISIT_PROFILE, format_entry
from warcio.archiveiterator import ArchiveIterator

from tests.crawler.running import base_args
from tests.crawler.wacz_check import wacz_validate


def _crawl(redis_url, cwd, crawl_id, *extra):
    config = parse_args(base_args_for(redis_url, cwd, crawl_id, *extra),
                        env={"CRAWLER_HOSTNAME": f"crawl-{crawl_id}-0"})
    assert int(asyncio.run(run_instance(config))) == 0
    return cwd / "collections" / "coll"


def base_args_for(redis_url, cwd, crawl_id, url, *extra):
    return base_args(url, redis_url, cwd, "--generateWACZ", "--scopeType", "host", *extra,
                     crawl_id=crawl_id)


def _index(wacz):
    with zipfile.ZipFile(wacz) as zf:
        return [json.loads(line.split(" ", 2)[2])
                for line in zf.read("indexes/index.cdxj").decode().splitlines()]


def test_a_recrawl_writes_revisits_for_kept_payloads(site, r, redis_url, tmp_path):
    _recrawl_writes_revisits(site, r, redis_url, tmp_path, "dd1", "dd2")


@pytest.mark.skipif(find_chromium() is None, reason="needs a Chromium")
def test_a_browser_mode_recrawl_writes_revisits_for_kept_payloads(site, r, redis_url,
                                                                  tmp_path):
    _recrawl_writes_revisits(site, r, redis_url, tmp_path, "db1", "db2",
                             "--browser", "--pageLoadTimeout", "20")


def _recrawl_writes_revisits(site, r, redis_url, tmp_path, first_id, second_id, *mode):
    first = _crawl(redis_url, tmp_path / "one", first_id, site.url, *mode)
    served = [e for e in _index(first / "coll.wacz") if e.get("status") == "200"]
    kept = {e["digest"]: e for e in served}
    requirement = {"filename": "one.wacz", "hash": "sha256:" + "0" * 64, "crawlId": first_id}
    r.hset(f"{second_id}:dedup", mapping={
        d: format_entry("2026-01-01T00:00:00Z", "f1", e["url"]) for d, e in kept.items()})
    r.hset(f"{second_id}:dedup:files", "f1", json.dumps(requirement))

    second = _crawl(redis_url, tmp_path / "two", second_id, site.url, *mode, "--dedup")

    revisits, responses, requests = [], [], []
    for warc in sorted((second / "archive").glob("*.warc.gz")):
        with open(warc, "rb") as fh:
            for record in ArchiveIterator(fh):
                if record.rec_type == "revisit":
                    headers = record.rec_headers
                    assert headers.get_header("WARC-Profile") == REVISIT_PROFILE
                    assert headers.get_header("WARC-Refers-To-Date") == "2026-01-01T00:00:00Z"
                    digest = headers.get_header("WARC-Payload-Digest")
                    assert headers.get_header("WARC-Refers-To-Target-URI") == kept[digest]["url"]
                    # The block is the response cut short to its headers (WARC 1.1 6.7.2).
                    assert headers.get_header("WARC-Truncated") == "length"
                    assert headers.get_header("Content-Type") == "application/http"
                    assert record.http_headers.get_statuscode() == "200"
                    assert record.content_stream().read() == b""
                    revisits.append(headers.get_header("WARC-Target-URI"))
                elif record.rec_type == "response":
                    responses.append(record.rec_headers.get_header("WARC-Target-URI"))
                elif record.rec_type == "request":
                    # A body-less request has no payload to digest.
                    assert record.rec_headers.get_header("WARC-Payload-Digest") is None
                    requests.append(record.rec_headers.get_header("WARC-Target-URI"))
    # The site is unchanged: every 200 it served the first time is a revisit now (of the
    # first URL kept with that payload: the site serves some files under two names), but
    # for b.html, gzipped afresh per request: the gzip header's time (whole seconds) changes
    # its payload unless both crawls fetched it within the same second.
    every = {e["url"] for e in served}
    assert every - {site.url + "b.html"} <= set(revisits) <= every
    assert all(url not in revisits for url in responses)
    # A revisit of a GET has no request record (replay finds a GET by its URL); a response
    # keeps its own.
    assert sorted(requests) == sorted(responses)

    wacz = second / "coll.wacz"
    result = wacz_validate(wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    with zipfile.ZipFile(wacz) as zf:
        package = json.loads(zf.read("datapackage.json"))
    assert package["relation"] == {"requires": [requirement]}
    assert {e["mime"] for e in _index(wacz) if e["url"] in revisits} == {"warc/revisit"}


def test_without_dedup_the_known_payloads_are_ignored(site, r, redis_url, tmp_path):
    first = _crawl(redis_url, tmp_path / "one", "dd3", site.url)
    digest = next(e["digest"] for e in _index(first / "coll.wacz") if e.get("status") == "200")
    r.hset("dd4:dedup", digest, format_entry("2026-01-01T00:00:00Z", "f1", site.url))
    second = _crawl(redis_url, tmp_path / "two", "dd4", site.url)
    assert all(e.get("mime") != "warc/revisit" for e in _index(second / "coll.wacz"))
    with zipfile.ZipFile(second / "coll.wacz") as zf:
        assert "relation" not in json.loads(zf.read("datapackage.json"))

"""What a finished crawl leaves: WARCs, pages.jsonl, a valid WACZ, and the Redis keys."""

from __future__ import annotations

import json
import re
import zipfile

from warcio.archiveiterator import ArchiveIterator

from tests.crawler.wacz_check import wacz_validate


def warc_records(coll) -> list:
    records = []
    for warc in sorted((coll.dir / "archive").glob("*.warc.gz")):
        with open(warc, "rb") as fh:
            for record in ArchiveIterator(fh):
                records.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                                record.rec_headers.get_header("WARC-Payload-Digest")))
    return records


def test_the_wacz_validates_and_indexes_every_page_and_requisite(spawn, site):
    crawler = spawn(site.url, "--generateWACZ", "--scopeType", "host")
    assert crawler.wait() == 0
    coll = crawler.collection
    result = wacz_validate(coll.wacz)
    assert result.returncode == 0, result.stdout + result.stderr
    with zipfile.ZipFile(coll.wacz) as zf:
        names = set(zf.namelist())
        index = zf.read("indexes/index.cdxj").decode()
        package = json.loads(zf.read("datapackage.json"))
    assert {"datapackage.json", "datapackage-digest.json", "pages/pages.jsonl",
            "indexes/index.cdxj"} <= names
    assert any(n.startswith("archive/") and n.endswith(".warc.gz") for n in names)
    indexed = {json.loads(line.split(" ", 2)[2])["url"] for line in index.splitlines()}
    assert site.expected_pages("host") | site.requisites <= indexed
    assert {r["path"] for r in package["resources"]} == names - {
        "datapackage.json", "datapackage-digest.json"}
    assert all(r["hash"].startswith("sha256:") and r["bytes"] > 0 for r in package["resources"])


def test_every_response_has_a_request_record_and_a_payload_digest(crawl, site):
    _, coll = crawl(site.url)
    records = warc_records(coll)
    responses = {url for kind, url, _ in records if kind == "response"}
    requests = {url for kind, url, _ in records if kind == "request"}
    assert responses == requests
    assert site.expected_pages("prefix") | site.requisites <= responses
    assert all(digest.startswith("sha1:") for kind, _, digest in records if kind == "response")


def test_every_record_says_warc_1_1_whose_dates_have_milliseconds(crawl, site):
    _, coll = crawl(site.url)
    for warc in (coll.dir / "archive").glob("*.warc.gz"):
        with open(warc, "rb") as fh:
            for record in ArchiveIterator(fh):
                assert record.rec_headers.protocol == "WARC/1.1"
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z",
                                    record.rec_headers.get_header("WARC-Date"))


def test_nothing_is_fetched_twice(crawl, site):
    crawl(site.url, "--workers", "4", "--scopeType", "host")
    assert set(site.requests.values()) == {1}


def test_pages_jsonl_has_the_header_and_one_record_per_page(crawl, site):
    _, coll = crawl(site.url)
    lines = (coll.dir / "pages" / "pages.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"format": "json-pages-1.0", "id": "pages",
                                    "title": "All Pages"}
    seed = next(p for p in coll.pages if p["url"] == site.url)
    assert seed["seed"] is True and seed["depth"] == 0 and seed["title"] == "Index"
    assert seed["mime"] == "text/html" and seed["status"] == 200
    assert {"id", "url", "title", "ts", "mime", "status", "depth", "seed", "loadState"} <= set(seed)
    assert "filename" not in seed  # in a WACZ's pages list it would name a WACZ, not a WARC
    # The page text, as the real crawler's --text to-pages writes it (for search).
    assert seed["text"].startswith("Index Lorem ipsum dolor sit amet") and "  " not in seed["text"]
    assert len(coll.pages) == len(coll.page_urls)


def test_a_gzip_encoded_page_is_parsed_and_archived_as_sent(crawl, site):
    _, coll = crawl(site.url)
    assert site.root + "/site/b1.html" in coll.page_urls  # only linked from gzip b.html


def test_redis_pages_match_pages_jsonl_and_counters_follow_the_contract(crawl, site, r):
    code, coll = crawl(site.url, "--writePagesToRedis", "--scopeType", "any",
                       instance="crawl-crawl1-0")
    assert code == 0
    redis_pages = [json.loads(p) for p in r.lrange("crawl1:pages", 0, -1)]
    assert all(p.pop("filename").endswith(".warc.gz") for p in redis_pages)  # Redis only
    # The text stays in pages.jsonl: the runner drains Redis every tick, and indexes the text
    # from the kept WACZ off the tick.
    listed = [{k: v for k, v in p.items() if k != "text"} for p in coll.pages]
    assert sorted(redis_pages, key=lambda p: p["url"]) == sorted(listed, key=lambda p: p["url"])
    assert int(r.get("crawl1:d")) == len(coll.pages)
    assert r.scard("crawl1:s") == len(coll.pages) + r.llen("crawl1:f")
    assert r.hgetall("crawl1:status") == {"crawl-crawl1-0": "done"}
    warc_bytes = sum(p.stat().st_size for p in (coll.dir / "archive").glob("*.warc.gz"))
    # The page lines count too: with their text they weigh about as much as the pages' HTML.
    lines = (coll.dir / "pages" / "pages.jsonl").read_bytes().splitlines(keepends=True)[1:]  # not the header
    assert int(r.hget("crawl1:size", "crawl-crawl1-0")) == warc_bytes + sum(map(len, lines))
    assert r.zcard("crawl1:q") == 0 and r.hlen("crawl1:p") == 0


def test_errors_go_to_redis_with_log_errors_to_redis(spawn, site, r):
    crawler = spawn(site.url, "--scopeType", "any", "--logErrorsToRedis")
    assert crawler.wait() == 0
    errors = [json.loads(line) for line in r.lrange("crawl1:e", 0, -1)]
    assert any(site.external_url in e["message"] and e["logLevel"] == "error" for e in errors)
    assert (crawler.collection.dir / "logs").is_dir()
    assert list((crawler.collection.dir / "logs").glob("*.log"))


def test_a_crawl_without_any_successful_page_fails_with_code_9(spawn, site, r):
    crawler = spawn(site.external_url)
    assert crawler.wait() == 9
    assert r.hget("crawl1:status", "crawl-crawl1-0") == "failed"


def test_a_page_slower_than_the_timeout_is_listed_as_failed(crawl, r):
    from tests.sitegen import serve_site

    with serve_site(slow_delay=2) as site:
        code, coll = crawl(site.url, "--depth", "1", "--pageLoadTimeout", "0.5")
    assert code == 0
    failed = [json.loads(f)["url"] for f in r.lrange("crawl1:f", 0, -1)]
    assert failed == [site.root + "/site/slow.html"]
    assert site.root + "/site/slow.html" not in coll.page_urls


def test_a_warc_cut_short_without_an_index_is_packed_up_to_its_last_whole_record(tmp_path):
    from datetime import UTC, datetime

    from archiver_crawler.wacz import build_wacz
    from archiver_crawler.warc import Exchange, WarcFile

    coll = tmp_path / "collections" / "coll"
    warc = WarcFile(coll / "archive", "crawl-x-0", "coll")
    for i in range(3):
        warc.write(Exchange(
            url=f"http://127.0.0.1:9/p{i}.html", method="GET", request_target=f"/p{i}.html",
            request_headers=[("Host", "127.0.0.1:9")], http_version="HTTP/1.1", status=200,
            reason="OK", response_headers=[("Content-Type", "text/html")],
            body=b"<html>hello</html>", date=datetime.now(UTC)))
    whole = warc.path.read_bytes()
    warc._fh.write(whole[-40:-10])  # a killed writer's half record, and no index beside it
    warc._fh.flush()
    (coll / "pages").mkdir()
    (coll / "pages" / "pages.jsonl").write_text(
        '{"format": "json-pages-1.0", "id": "pages"}\n{"id": "a", "url": '
        '"http://127.0.0.1:9/p0.html", "ts": "2024-01-01T00:00:00Z"}\n{"id": "b", "url": "ht')
    wacz = build_wacz(coll, "coll")
    warc._fh.close()
    assert wacz_validate(wacz).returncode == 0
    with zipfile.ZipFile(wacz) as zf:
        index = zf.read("indexes/index.cdxj").decode().splitlines()
        pages = zf.read("pages/pages.jsonl").decode().splitlines()
    assert len(index) == 3
    assert len(pages) == 2

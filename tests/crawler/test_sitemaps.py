"""Seeds from sitemaps (--sitemap, --sitemapFromDate) and seed files (--seedFile): what is
queued from them, and the hostile sitemaps refused while the crawl goes on."""

from __future__ import annotations

import gzip
import json
import zlib
from datetime import UTC, datetime

import pytest
from archiver_crawler.config import MAX_SEED_FILE, parse_args
from archiver_crawler.errors import ConfigError
from archiver_crawler.sitemap import (
    MAX_SITEMAP_BYTES,
    SitemapRefused,
    bounded_gunzip,
    parse,
    unpack,
    w3c_datetime,
)

from tests.sitegen import Response, html, serve_site

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
XML = "application/xml"


def urlset(*entries: tuple[str, str | None]) -> bytes:
    urls = "".join(f"<url><loc>{loc}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>"
                   for loc, mod in entries)
    return f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>{urls}</urlset>'.encode()


def index(*locs: str) -> bytes:
    maps = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<?xml version="1.0"?><sitemapindex {NS}>{maps}</sitemapindex>'.encode()


def page(title: str) -> Response:
    return Response(body=html(title, []))


LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
          b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
          b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
          b'<urlset ' + NS.encode() + b'><url><loc>&lol3;</loc></url></urlset>')


# --- parsing, unit ---------------------------------------------------------------------------


def test_w3c_datetimes_of_every_precision_are_read_in_utc():
    assert w3c_datetime("2026") == datetime(2026, 1, 1, tzinfo=UTC)
    assert w3c_datetime("2026-05-01") == datetime(2026, 5, 1, tzinfo=UTC)
    assert w3c_datetime("2026-05-01T10:00:00+02:00") == datetime(2026, 5, 1, 8, tzinfo=UTC)
    assert w3c_datetime("2026-05-01T10:00Z") == datetime(2026, 5, 1, 10, tzinfo=UTC)
    assert w3c_datetime("yesterday") is None
    assert w3c_datetime("2026-13-40") is None


def test_a_urlset_an_index_and_a_text_sitemap_are_read():
    parsed = parse(urlset(("http://a.test/x", "2026-01-02"), ("http://a.test/y", None)))
    assert not parsed.is_index
    assert [(e.url, e.lastmod) for e in parsed.entries] == [
        ("http://a.test/x", datetime(2026, 1, 2, tzinfo=UTC)), ("http://a.test/y", None)]
    assert parse(index("http://a.test/s1.xml")).is_index
    assert [e.url for e in parse(b"http://a.test/1\n\nnot a url\nhttps://a.test/2\n").entries] == [
        "http://a.test/1", "https://a.test/2"]


def test_a_dtd_an_unknown_root_and_broken_xml_are_refused():
    with pytest.raises(SitemapRefused, match="entity attack"):
        parse(LAUGHS)
    with pytest.raises(SitemapRefused, match="neither a urlset nor a sitemapindex"):
        parse(b"<html><body/></html>")
    with pytest.raises(SitemapRefused, match="not well-formed XML"):
        parse(b"<urlset><url>")


def test_a_gzip_bomb_is_refused_not_truncated():
    assert bounded_gunzip(gzip.compress(b"x" * 1000)) == b"x" * 1000
    bomb = gzip.compress(b"\0" * (MAX_SITEMAP_BYTES + 1), compresslevel=1)
    with pytest.raises(SitemapRefused, match="decompression bomb"):
        unpack(bomb, None)
    with pytest.raises(SitemapRefused, match="not valid gzip"):
        unpack(b"\x1f\x8bnot gzip", None)
    xml = urlset(("http://a.test/x", None))
    assert unpack(zlib.compress(xml), "deflate") == xml
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert unpack(raw.compress(xml) + raw.flush(), "deflate") == xml
    with pytest.raises(SitemapRefused, match="Content-Encoding"):
        unpack(xml, "br")


def test_sitemap_options_are_checked(tmp_path):
    base = ["--url", "http://a.test/", "--cwd", str(tmp_path)]
    config = parse_args([*base, "--sitemap", "--sitemapFromDate", "2026-05-01"], env={})
    assert (config.sitemap, config.sitemap_from) == ("auto", datetime(2026, 5, 1, tzinfo=UTC))
    assert parse_args([*base, "--sitemap", "http://a.test/s.xml"], env={}).sitemap == "http://a.test/s.xml"
    assert parse_args(base, env={}).sitemap is None
    with pytest.raises(ConfigError, match="not an http"):
        parse_args([*base, "--sitemap", "file:///etc/passwd"], env={})
    with pytest.raises(ConfigError, match="not a date"):
        parse_args([*base, "--sitemapFromDate", "last week"], env={})


def test_a_seed_file_too_large_is_refused(tmp_path):
    big = tmp_path / "seeds.txt"
    big.write_bytes(b"http://a.test/\n" * (MAX_SEED_FILE // 15 + 1))
    with pytest.raises(ConfigError, match="larger than"):
        parse_args(["--seedFile", str(big), "--cwd", str(tmp_path)], env={})


# --- crawls of a real site on 127.0.0.1 --------------------------------------------------------


def test_a_page_linked_from_nowhere_but_the_sitemap_is_archived(crawl):
    extra = {"/site/orphan.html": page("Orphan"), "/sitemap.xml": Response(content_type=XML)}
    with serve_site(extra=extra) as site:
        extra["/sitemap.xml"].body = urlset((site.root + "/site/orphan.html", None))
        code, coll = crawl(site.url, "--sitemap", site.root + "/sitemap.xml")
    assert code == 0
    assert site.root + "/site/orphan.html" in coll.page_urls
    assert site.expected_pages("prefix") <= coll.page_urls


def test_sitemaps_are_read_once_per_crawl_by_one_instance(crawl, r):
    extra = {"/site/orphan.html": page("Orphan"), "/sitemap.xml": Response(content_type=XML)}
    with serve_site(extra=extra) as site:
        extra["/sitemap.xml"].body = urlset((site.root + "/site/orphan.html", None))
        r.set("crawl1:sitemapClaim", "crawl-crawl1-1")  # another instance is reading them
        _, coll = crawl(site.url, "--sitemap", "--depth", "0")
        assert coll.page_urls == {site.url} and site.requests["/sitemap.xml"] == 0
        r.delete("crawl1:sitemapClaim", "crawl1:status", "crawl1:s")
        crawl(site.url, "--sitemap", "--depth", "0")
        r.delete("crawl1:status", "crawl1:s")
        crawl(site.url, "--sitemap", "--depth", "0", instance="crawl-crawl1-1")
    assert site.requests["/sitemap.xml"] == 1 and r.exists("crawl1:sitemapDone")


def test_sitemaps_named_by_robots_txt_are_found_through_gzipped_indexes(crawl):
    extra = {"/site/orphan.html": page("Orphan"),
             "/robots.txt": Response(body=b"User-agent: *\nSitemap: /maps/index.xml.gz\n",
                                     content_type="text/plain"),
             "/maps/index.xml.gz": Response(content_type="application/gzip"),
             "/maps/pages.xml.gz": Response(content_type="application/gzip")}
    with serve_site(extra=extra) as site:
        extra["/maps/index.xml.gz"].body = gzip.compress(index(site.root + "/maps/pages.xml.gz"))
        extra["/maps/pages.xml.gz"].body = gzip.compress(urlset((site.root + "/site/orphan.html", None)))
        code, coll = crawl(site.url, "--sitemap", "--depth", "0")
    assert code == 0
    assert coll.page_urls == {site.url, site.root + "/site/orphan.html"}


def test_sitemap_from_date_queues_only_pages_modified_since(crawl):
    extra = {"/site/old.html": page("Old"), "/site/new.html": page("New"),
             "/site/undated.html": page("Undated"), "/sitemap.xml": Response(content_type=XML)}
    with serve_site(extra=extra) as site:
        extra["/sitemap.xml"].body = urlset(
            (site.root + "/site/old.html", "2026-01-01"),
            (site.root + "/site/new.html", "2026-06-01T12:00:00+00:00"),
            (site.root + "/site/undated.html", None))
        code, coll = crawl(site.url, "--sitemap", site.root + "/sitemap.xml", "--depth", "0",
                           "--sitemapFromDate", "2026-05-01T00:00:00Z")
    assert code == 0
    # A page with no lastmod may have changed: it is visited.
    assert coll.page_urls == {site.url, site.root + "/site/new.html", site.root + "/site/undated.html"}
    assert site.requests["/site/old.html"] == 0


def test_hostile_sitemaps_are_refused_with_their_reason_and_the_crawl_goes_on(spawn, r):
    bomb = gzip.compress(b"\0" * (MAX_SITEMAP_BYTES + 1), compresslevel=1)
    extra = {"/site/good.html": page("Good"), "/maps/index.xml": Response(content_type=XML),
             "/maps/good.xml": Response(content_type=XML),
             "/maps/bomb.xml.gz": Response(body=bomb, content_type="application/gzip"),
             "/maps/laughs.xml": Response(body=LAUGHS, content_type=XML),
             "/maps/far.xml": Response(content_type=XML)}
    with serve_site(extra=extra) as site:
        extra["/maps/index.xml"].body = index(
            site.root + "/maps/bomb.xml.gz", site.root + "/maps/laughs.xml",
            "http://10.255.1.2/sitemap.xml", site.root + "/maps/far.xml", site.root + "/maps/good.xml")
        extra["/maps/far.xml"].body = urlset(("http://169.254.169.254/latest/meta-data/", None),
                                             ("http://10.255.1.2/page.html", None))
        extra["/maps/good.xml"].body = urlset((site.root + "/site/good.html", None))
        crawler = spawn(site.url, "--sitemap", site.root + "/maps/index.xml", "--depth", "0",
                        "--scopeType", "any", "--logErrorsToRedis")
        assert crawler.wait() == 0, crawler.stderr
    assert crawler.collection.page_urls == {site.url, site.root + "/site/good.html"}
    # The crawl's own log (what its owner sees) has every refusal, once.
    said = [json.loads(line)["message"] for line in r.lrange("crawl1:e", 0, -1)]
    assert len(said) == 4, said
    log = "\n".join(said)
    assert "bomb.xml.gz not read: decompresses to more than 50 MiB (a decompression bomb?)" in log
    assert "laughs.xml not read: has a DTD" in log
    assert "http://10.255.1.2/sitemap.xml not read: refused by the crawl address policy: 10.255.1.2" in log
    assert ("2 URL(s) listed in sitemaps not queued; the first was refused by the crawl address "
            "policy: 169.254.169.254 is a link-local address") in log


def test_every_url_of_a_seed_file_is_crawled(crawl, tmp_path):
    with serve_site() as site:
        seeds = tmp_path / "seeds.txt"
        seeds.write_text(f"# the pages to keep\n\n{site.root}/site/a.html\n  {site.root}/other/page.html  \n"
                         f"{site.root}/site/b1.html\n")
        code, coll = crawl(site.url, "--seedFile", str(seeds), "--depth", "0")
    assert code == 0
    assert coll.page_urls == {site.url, site.root + "/site/a.html", site.root + "/other/page.html",
                              site.root + "/site/b1.html"}


def test_a_seed_file_given_as_a_url_is_read_once_and_its_urls_crawled(crawl, r):
    extra = {"/seeds.txt": Response(content_type="text/plain")}
    with serve_site(extra=extra) as site:
        extra["/seeds.txt"].body = (f"# seeds\n{site.root}/site/a.html\nnot a url\n"
                                    f"{site.root}/site/b1.html\n").encode()
        code, coll = crawl(site.url, "--seedFile", site.root + "/seeds.txt", "--depth", "0")
        assert code == 0
        assert coll.page_urls == {site.url, site.root + "/site/a.html", site.root + "/site/b1.html"}
        assert r.lrange("crawl1:seedFile", 0, -1) == [site.root + "/site/a.html", site.root + "/site/b1.html"]
        r.delete("crawl1:status")
        crawl(site.url, "--seedFile", site.root + "/seeds.txt", "--depth", "0")  # a relaunch
    assert site.requests["/seeds.txt"] == 1


def test_a_seed_file_url_the_address_policy_refuses_is_an_invalid_config(crawl):
    # run_instance raises it; the process's exit code for it is 4 (ConfigError.exit_code).
    with pytest.raises(ConfigError, match="seeds.txt not read: refused by the crawl address policy"):
        crawl("http://127.0.0.1:9/", "--seedFile", "http://10.255.1.2/seeds.txt")

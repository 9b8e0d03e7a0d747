"""Fast unit tests: option parsing, scope rules and link extraction (no servers)."""

from __future__ import annotations

import pytest
from archiver_crawler.config import parse_args
from archiver_crawler.errors import ConfigError
from archiver_crawler.links import TEXT_LIMIT, extract_css, extract_html
from archiver_crawler.scope import Seed, normalize_url


def config(*args: str, env: dict | None = None):
    return parse_args(list(args), env=env if env is not None else {})


def test_the_command_line_wins_over_the_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seeds: [http://a.test/x/]\nworkers: 2\ndepth: 3\ngenerateWACZ: true\n")
    c = config("--config", str(path), "--workers", "5")
    assert c.workers == 5 and c.depth == 3 and c.generate_wacz
    assert [s.url for s in c.seeds] == ["http://a.test/x/"]


def test_a_leading_crawl_word_and_the_runner_flags_are_accepted(tmp_path):
    c = config("crawl", "--url", "http://a.test/", "--headless", "--restartsOnError",
               "--healthCheckPort", "6065", "--pageLimit", "7", "--crawlId", "c9", "--text", "to-pages",
               env={"CRAWLER_HOSTNAME": "crawl-c9-0"})
    assert c.limit == 7 and c.crawl_id == "c9" and c.instance_id == "crawl-c9-0"
    assert c.health_check_port == 6065 and c.restarts_on_error


def test_the_crawl_id_defaults_to_the_environment():
    assert config("--url", "http://a.test/", env={"CRAWL_ID": "env-id"}).crawl_id == "env-id"


@pytest.mark.parametrize("args", [
    ("--url", "ftp://a.test/"),
    ("--url", "http://a.test/", "--include", "(unclosed"),
    ("--url", "http://a.test/", "--workers", "0"),
    ("--url", "http://a.test/", "--depth", "deep"),
    ("--url", "http://a.test/", "--sizeLimit", "-1"),
    ("--url", "http://a.test/", "--collection", "a b"),
])
def test_invalid_values_are_config_errors(args):
    with pytest.raises(ConfigError):
        config(*args)


def seed(url: str, *args: str) -> Seed:
    c = config("--url", url, *args)
    return Seed(0, c.seeds[0].url, c, c.seeds[0])


def test_prefix_scope_is_the_seed_directory_over_either_scheme():
    s = seed("http://a.test/docs/index.html")
    assert s.decide("https://a.test/docs/b/c.html", 1, 1)
    assert not s.decide("http://a.test/other/", 1, 1)


def test_domain_scope_takes_subdomains_and_drops_www():
    s = seed("http://www.a.test/x", "--scopeType", "domain")
    assert s.decide("http://sub.a.test/y", 1, 1)
    assert s.decide("http://a.test/", 1, 1)
    assert not s.decide("http://a.testing/", 1, 1)


def test_extra_hops_allow_out_of_scope_pages_up_to_the_count():
    s = seed("http://a.test/x/", "--extraHops", "1")
    decision = s.decide("http://b.test/", 1, 1)
    assert decision and decision.out_of_scope
    assert not s.decide("http://b.test/", 2, 2)


def test_exclusions_beat_inclusions():
    s = seed("http://a.test/", "--scopeType", "host", "--exclude", "logout")
    assert not s.decide("http://a.test/logout", 1, 1)


def test_fragments_are_dropped_and_other_schemes_ignored():
    assert normalize_url("http://a.test/p#top") == "http://a.test/p"
    assert normalize_url("mailto:x@a.test") is None
    assert normalize_url("http://a.test") == "http://a.test/"


def test_links_and_requisites_come_from_one_parse():
    body = b"""<html><head><title> Two  words </title><base href="/b/">
    <link rel="stylesheet" href="s.css"><link rel="alternate" href="feed.xml">
    <style>div { background: url("bg.png") }</style></head>
    <body><a href="p.html#x">p</a><a href="javascript:void(0)">j</a>
    <img src="i.png" srcset="i1.png 1x, i2.png 2x"><video poster="v.jpg"></video>
    <iframe src="frame.html"></iframe><p style="background:url(st.png)"></p></body></html>"""
    out = extract_html(body, "http://a.test/dir/page.html")
    assert out.title == "Two words"
    assert out.links == ["http://a.test/b/p.html"]
    assert set(out.requisites) == {f"http://a.test/b/{n}" for n in (
        "s.css", "bg.png", "i.png", "i1.png", "i2.png", "v.jpg", "frame.html", "st.png")}


def test_the_page_text_drops_scripts_and_styles_and_collapses_whitespace():
    body = (b"<html><head><title>T</title><style>p {color: red}</style></head><body>"
            b"<p>Hello\n\n   <b>brave</b>\tnew</p><script>var secret = 1;</script>"
            b"<noscript>enable js</noscript><div>world</div></body></html>")
    assert extract_html(body, "http://127.0.0.1/").text == "Hello brave new world"


def test_the_page_text_is_bounded():
    body = b"<body><p>" + b"word " * 300_000 + b"</p></body>"
    assert len(extract_html(body, "http://127.0.0.1/").text) == TEXT_LIMIT


def test_css_imports_and_urls_are_resolved_against_the_stylesheet():
    css = b"@import 'base.css'; a { background: url(../img/a.png) } b { x: url(data:x) }"
    assert extract_css(css, "http://a.test/css/site.css") == [
        "http://a.test/css/base.css", "http://a.test/img/a.png"]


def test_a_full_disk_while_writing_a_warc_is_out_of_space(tmp_path, monkeypatch):
    import errno

    from archiver_crawler.errors import ExitCode, OutOfSpace
    from archiver_crawler.warc import WarcFile

    warc = WarcFile(tmp_path / "archive", "crawl-x-0", "coll")

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(warc, "_write_exchange", full)
    with pytest.raises(OutOfSpace) as caught:
        warc.write(None)
    assert caught.value.exit_code == ExitCode.OUT_OF_SPACE == 3
    warc.close()


@pytest.mark.parametrize("href", ["/a.html", "/a/b.html?x=1&y=2", "/a.html#frag", "/a/../b.html",
                                  "/./c.html", "//other.test/d", "/", "/%7Euser/"])
def test_absolute_paths_resolve_as_urljoin_does(href):
    from urllib.parse import urljoin

    base = "https://h.test:8443/dir/page.html"
    out = extract_html(f'<a href="{href}">x</a>'.encode(), base)
    assert out.links == [normalize_url(urljoin(base, href))]


_BASES = ["https://h.test:8443/dir/page.html", "http://h.test", "http://h.test/a/?q=1/2",
          "http://h.test/a;p/b;q?x#f", "http://h.test/a/b/"]
_HREFS = ["x.html", "../x.html", "./", "..", "//o.test/p", "http:g", "g?y", "?y", ";x", "g;x",
          "g#s", "  ../../../z  ", "a/./b/../c", "http://o.test/p#q", "g%20h", "..//x",
          "?q#x", "/a#/.x", " #x", "x#", "mailto:x#y"]


@pytest.mark.parametrize("base", _BASES)
def test_relative_links_resolve_as_urljoin_does_whichever_page_resolved_them_first(base):
    from urllib.parse import urljoin

    page = "".join(f'<a href="{h}">x</a>' for h in _HREFS).encode()
    # The second page of the same directory takes every link but "?y" and ";x" from the cache.
    for _ in range(2):
        expected = [u for u in (normalize_url(urljoin(base, h.strip())) for h in _HREFS
                                if not h.strip().startswith(("#", "mailto:"))) if u]
        assert extract_html(page, base).links == list(dict.fromkeys(expected))
        base = base.replace("page.html", "other.html")


def test_links_known_to_be_seen_are_not_judged_again_and_a_limit_keeps_them_unknown():
    import asyncio

    from archiver_crawler.frontier import Frontier
    from archiver_crawler.state import QueueEntry

    frontier = Frontier(config("--url", "http://h.test/"), state=None, fetcher=None)
    seed, page = frontier.seeds[0], QueueEntry(url="http://h.test/", seed_id=0, depth=0)
    urls = [f"http://h.test/{i}" for i in range(3)]
    entries = asyncio.run(frontier.in_scope(page, seed, urls))
    assert [e.url for e in entries] == urls
    frontier.committed(entries, queued=2, limit=10)  # the limit turned one away: not in `:s`
    assert not frontier.known
    frontier.committed(entries[:2], queued=0, limit=0)  # seen already, or queued now
    assert [e.url for e in asyncio.run(frontier.in_scope(page, seed, urls))] == urls[2:]


# The keys ReplayWeb.page computes for these URLs: warcio.js getSurt (warcio.js
# src/lib/utils.ts, bundled in ReplayWeb.page 2.5.3's sw.js with wabac.js 2.27.2), run on
# each URL to get the right-hand side. Its rule: drop a lower-case "www", "www2"... prefix,
# lower-case the URL, parse it as a browser does (new URL), reverse the host's labels (an IP
# address's octets too), add the port unless it is the scheme's default, then ")" and the
# pathname as parsed (a trailing slash is kept, unlike the surt package's rule), then the
# query's "&"-separated parts sorted; the fragment is dropped; non-http(s) URLs are keys as
# they are.
WABAC_KEYS = {
    # trailing slashes
    "http://127.0.0.1:36349/gen/": "1,0,0,127:36349)/gen/",
    "http://localhost:8000/gen/": "localhost:8000)/gen/",
    "http://example.com/~u/": "com,example)/~u/",
    "http://example.com": "com,example)/",
    "http://example.com/": "com,example)/",
    "http://example.com/a//b": "com,example)/a//b",
    # IP hosts and ports
    "http://127.0.0.1:36349/": "1,0,0,127:36349)/",
    "http://127.0.0.1:8000/gen/p1.html": "1,0,0,127:8000)/gen/p1.html",
    "http://127.0.0.1:80/a": "1,0,0,127)/a",
    "https://127.0.0.1:443/a/": "1,0,0,127)/a/",
    "http://127.0.0.1:443/a": "1,0,0,127:443)/a",
    "http://1.2.3.4/x/": "4,3,2,1)/x/",
    "http://[::1]:8080/a": "[::1]:8080)/a",
    "http://[2001:db8::1]/a/": "[2001:db8::1])/a/",
    "http://example.com:080/x": "com,example)/x",
    "https://example.com:8443/x": "com,example:8443)/x",
    # query strings and fragments
    "http://example.com/a?b=2&a=1": "com,example)/a?a=1&b=2",
    "http://example.com/a/?b=2&a=1&B=0": "com,example)/a/?a=1&b=0&b=2",
    "http://example.com/a?": "com,example)/a",
    "http://example.com?x=1": "com,example)/?x=1",
    "http://example.com/a?b&a=": "com,example)/a?a=&b",
    "http://example.com/a?q=a b": "com,example)/a?q=a%20b",
    "http://example.com/a?q=a%20b&x=é": "com,example)/a?q=a%20b&x=%C3%A9",
    "http://example.com/a?x='y'&z=\"w\"": "com,example)/a?x=%27y%27&z=%22w%22",
    "http://example.com/a/b?c=d/e?f": "com,example)/a/b?c=d/e?f",
    "http://example.com/A%7E?Q=%7E": "com,example)/a%7e?q=%7e",
    "http://example.com/a#frag": "com,example)/a",
    "http://example.com/a?x=1#frag": "com,example)/a?x=1",
    # hosts, paths and schemes
    "https://Example.COM/A/b.html": "com,example)/a/b.html",
    "http://www.example.com/a/": "com,example)/a/",
    "http://www2.example.com/": "com,example)/",
    "http://wwwx.example.com/": "com,example,wwwx)/",
    "http://WWW.example.com/a": "com,example,www)/a",
    "http://user@www.example.com:8080/a/": "com,example,www:8080)/a/",
    "http://Bücher.ch/": "ch,xn--bcher-kva)/",
    "http://example.com./x": ",com,example)/x",
    "http://example.com/a/./b": "com,example)/a/b",
    "http://example.com/a/../b": "com,example)/b",
    "http://example.com/a/%2e%2e/b": "com,example)/b",
    "http://example.com/a/..": "com,example)/",
    "http://example.com/a/.": "com,example)/a/",
    "http://example.com/a%2Fb": "com,example)/a%2fb",
    "http://example.com/é": "com,example)/%C3%A9",
    "http://example.com/a\"b<c>{d}`e": "com,example)/a%22b%3Cc%3E%7Bd%7D%60e",
    "http://example.com/a\\b": "com,example)/a/b",
    "http://example.com/a;jsessionid=1": "com,example)/a;jsessionid=1",
    "ftp://example.com/x": "ftp://example.com/x",
}


@pytest.mark.parametrize(("url", "key"), WABAC_KEYS.items())
def test_the_cdxj_url_key_is_the_one_replaywebpage_looks_up(url, key):
    from archiver_crawler.warc import url_key

    assert url_key(url) == key


def small_collection(root, urls: list[str]):
    from datetime import UTC, datetime

    from archiver_crawler.warc import Exchange, WarcFile

    coll = root / "collections" / "coll"
    warc = WarcFile(coll / "archive", "crawl-x-0", "coll")
    for url in urls:
        warc.write(Exchange(
            url=url, method="GET", request_target="/", request_headers=[("Host", "h")],
            http_version="HTTP/1.1", status=200, reason="OK",
            response_headers=[("Content-Type", "text/html")], body=b"<html>hello</html>",
            date=datetime.now(UTC)))
    warc.close()
    (coll / "pages").mkdir()
    (coll / "pages" / "pages.jsonl").write_text('{"format": "json-pages-1.0", "id": "pages"}\n')
    return coll, warc


def test_wacz_entries_start_where_replaywebpage_reads_them(tmp_path):
    """ReplayWeb.page (wabac.js ziprangereader) takes an entry without an extra field in the
    central directory to start 30 + name length bytes past its local header: the local
    header must then have no extra field either (a ZIP64 one made it read 20 bytes early)."""
    import struct
    import zipfile

    from archiver_crawler.wacz import build_wacz

    coll, _ = small_collection(tmp_path, ["http://127.0.0.1:9/gen/"])
    wacz = build_wacz(coll, "coll")
    raw = wacz.read_bytes()
    with zipfile.ZipFile(wacz) as zf:
        for entry in zf.infolist():
            assert entry.compress_type == zipfile.ZIP_STORED
            name_length, extra_length = struct.unpack_from("<HH", raw, entry.header_offset + 26)
            assert extra_length == len(entry.extra) == 0, entry.filename
            start = entry.header_offset + 30 + name_length
            assert raw[start:start + entry.file_size] == zf.read(entry), entry.filename


def test_lines_indexed_at_packing_time_are_keyed_as_the_crawler_keys_them(tmp_path):
    import zipfile

    from archiver_crawler.wacz import build_wacz
    from archiver_crawler.warc import sidecar_index_path

    urls = ["http://127.0.0.1:9/gen/", "http://127.0.0.1:9/gen/p1.html?b=1&a=2"]
    coll, warc = small_collection(tmp_path, urls)
    with zipfile.ZipFile(build_wacz(coll, "coll")) as zf:
        written = zf.read("indexes/index.cdxj").decode().splitlines()
    sidecar_index_path(warc.path).unlink()  # as when a session is killed: cdxj-indexer runs
    with zipfile.ZipFile(build_wacz(coll, "coll")) as zf:
        indexed = zf.read("indexes/index.cdxj").decode().splitlines()
    keys = ["1,0,0,127:9)/gen/", "1,0,0,127:9)/gen/p1.html?a=2&b=1"]  # as in WABAC_KEYS
    assert [line.split(" ", 1)[0] for line in written] == keys
    assert [line.split(" ", 1)[0] for line in indexed] == keys


def test_warc_records_read_back_with_warcio_with_their_digests(tmp_path):
    import hashlib
    from base64 import b32encode
    from datetime import UTC, datetime

    from archiver_crawler.warc import Exchange, WarcFile
    from warcio.archiveiterator import ArchiveIterator

    warc = WarcFile(tmp_path / "archive", "crawl-x-0", "coll")
    body = b"<html>\xe9t\xe9</html>"
    warc.write(Exchange(
        url="http://127.0.0.1:9/p.html", method="GET", request_target="/p.html",
        request_headers=[("Host", "127.0.0.1:9"), ("User-Agent", "t")], http_version="HTTP/1.1",
        status=200, reason="OK", response_headers=[("Content-Type", "text/html"),
                                                   ("Transfer-Encoding", "chunked")],
        body=body, date=datetime.now(UTC), ip="127.0.0.1"))
    warc.close()
    with open(warc.path, "rb") as fh:
        records, payloads = [], []
        for record in ArchiveIterator(fh, check_digests=True):
            records.append(record)
            payloads.append(record.content_stream().read())
    assert [r.rec_type for r in records] == ["warcinfo", "response", "request"]
    response, request = records[1], records[2]
    assert payloads[1] == body
    assert response.http_headers.get_header("X-Archive-Orig-Transfer-Encoding") == "chunked"
    assert response.rec_headers.get_header("WARC-Payload-Digest") == (
        "sha1:" + b32encode(hashlib.sha1(body).digest()).decode())
    assert request.rec_headers.get_header("WARC-Concurrent-To") == (
        response.rec_headers.get_header("WARC-Record-ID"))
    assert request.http_headers.protocol == "GET" and request.http_headers.get_header("Host")
    assert all(r.digest_checker.passed is not False for r in records)


def test_warc_dates_have_milliseconds_in_utc():
    from datetime import UTC, datetime, timedelta, timezone

    from archiver_crawler.warc import warc_date

    when = datetime(2024, 2, 29, 23, 59, 59, 987654, tzinfo=UTC)
    assert warc_date(when) == "2024-02-29T23:59:59.987Z"
    assert warc_date(when + timedelta(microseconds=20000)) == "2024-03-01T00:00:00.007Z"
    assert warc_date(when.astimezone(timezone(timedelta(hours=2)))) == "2024-02-29T23:59:59.987Z"

"""Browser mode (`--browser`) of the crawler, end to end: the real console script on real
Chromium and real Redis, against tests/jssite.py on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import zipfile
from pathlib import Path

import pytest
from archiver_crawler.browser import find_chromium
from archiver_crawler.config import parse_args
from archiver_crawler.errors import ConfigError
from warcio.archiveiterator import ArchiveIterator

from tests.crawler.hosts import Route, page, serve
from tests.crawler.test_browser_engine import refused_routes
from tests.crawler.wacz_check import wacz_validate
from tests.jssite import js_pages, js_site
from tests.sitegen import serve_site
from tests.waiting import DEFAULT_TIMEOUT, wait_for

pytestmark = pytest.mark.skipif(find_chromium() is None,
                                reason="no Chromium (apt-get install chromium)")

BROWSER = ("--browser", "--workers", "2", "--pageLoadTimeout", "20")


def records(collection_dir: Path) -> list[tuple[str, str, bytes]]:
    found = []
    for path in sorted((collection_dir / "archive").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                found.append((record.rec_type, record.rec_headers.get_header("WARC-Target-URI"),
                              record.content_stream().read()))
    return found


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def chromium_of(pid: int, timeout: float = DEFAULT_TIMEOUT) -> int:
    def chromium() -> int | None:
        for child in children(pid):
            try:
                exe = os.readlink(f"/proc/{child}/exe")
            except OSError:
                continue
            if "chrom" in exe:
                return child
        return None

    return wait_for(chromium, timeout, what="the crawler's Chromium")


def test_all_pages_of_the_js_site_are_archived_with_text_screenshot_and_page_info(spawn):
    with serve_site(extra=js_site(6)) as site:
        run = spawn(site.root + "/js/", *BROWSER, "--generateWACZ", "--text", "to-pages",
                    "--screenshot", "view", "--behaviors", "autoscroll,autoplay",
                    "--behaviorTimeout", "2")
        assert run.wait(120) == 0, run.stderr
    pages = run.collection.pages
    assert {p["url"] for p in pages} == js_pages(site.root, 6)
    by_url = {p["url"]: p for p in pages}
    home = by_url[site.root + "/js/"]
    assert home["title"] == "JS 0" and "drawn by script on page 0" in home["text"]
    assert home["status"] == 200 and home["loadState"] == 4
    found = records(run.collection.dir)
    uris = {(kind, uri) for kind, uri, _ in found}
    assert ("response", site.root + "/js/links/0.json") in uris  # the data the script fetched
    for url in js_pages(site.root, 6):
        assert {("resource", f"urn:{kind}:{url}") for kind in ("text", "view", "pageinfo")} <= uris
    # Requisites once per crawl, though every page loads them.
    assert sum(1 for kind, uri, _ in found
               if kind == "response" and uri == site.root + "/js/app.js") == 1
    info = next(json.loads(body) for kind, uri, body in found
                if uri == f"urn:pageinfo:{site.root}/js/")
    assert info["status"] == 200 and info["counts"]["refused"] == 0
    validated = wacz_validate(run.collection.wacz)
    assert validated.returncode == 0, validated.stdout + validated.stderr
    with zipfile.ZipFile(run.collection.wacz) as wacz:
        listed = [json.loads(line) for line in wacz.read("pages/pages.jsonl").splitlines()[1:]]
    assert all(p.get("text") for p in listed)


def test_http_mode_finds_only_the_pages_in_the_html(spawn):
    with serve_site(extra=js_site(6)) as site:
        run = spawn(site.root + "/js/", "--workers", "2")
        assert run.wait(60) == 0, run.stderr
    assert run.collection.page_urls == {site.root + "/js/"}


def test_a_redirected_page_is_archived_at_its_queued_url(spawn):
    with serve_site() as site:
        run = spawn(site.root + "/site/moved", *BROWSER, "--limit", "1")
        assert run.wait(60) == 0, run.stderr
    [moved] = run.collection.pages
    assert moved["url"] == site.root + "/site/moved"
    assert moved["finalUrl"] == site.root + "/site/target.html"
    uris = {(kind, uri) for kind, uri, _ in records(run.collection.dir)}
    assert {("response", site.root + "/site/moved"),
            ("response", site.root + "/site/target.html")} <= uris


def test_refused_addresses_see_no_request_from_a_browser_crawl(spawn):
    with serve({"/": page("secret", "secret")}, host="127.0.0.2") as other:
        routes: dict[str, Route] = {}
        with serve(routes) as allowed:
            refused = other.url("").rstrip("/")
            routes.update(refused_routes(refused, f"http://2130706434:{other.port}"))
            run = spawn(allowed.url("/"), *BROWSER, "--behaviors", "autoplay",
                        "--behaviorTimeout", "1", "--waitUntil", "load",
                        allow="127.0.0.1/32")
            assert run.wait(90) == 0, run.stderr
    assert other.hits == []
    assert run.collection.page_urls == {allowed.url("/")}
    info = next(json.loads(body) for kind, uri, body in records(run.collection.dir)
                if uri == f"urn:pageinfo:{allowed.url('/')}")
    assert info["counts"]["refused"] >= 7


def test_a_killed_chromium_is_replaced_and_the_crawl_finishes(spawn):
    with serve_site(extra=js_site(6)) as site:
        site.hold()
        run = spawn(site.root + "/js/", *BROWSER)
        first = chromium_of(run.proc.pid)
        wait_for(lambda: site.requests["/js/"] >= 1, what="the page's request")
        os.kill(first, signal.SIGKILL)
        site.release()
        assert run.wait(120) == 0, run.stderr
    assert run.collection.page_urls == js_pages(site.root, 6)
    assert site.requests["/js/"] == 2  # loaded again in the new browser
    assert "browser lost while loading" in run.collection.log_text
    assert first not in children(run.proc.pid)


def test_chromium_runs_sandboxed_as_an_unprivileged_user_when_root(spawn):
    if os.geteuid() != 0:
        pytest.skip("only root switches Chromium to an unprivileged user")
    with serve_site(extra=js_site(0)) as site:
        site.hold()
        run = spawn(site.root + "/js/", *BROWSER)
        chromium = chromium_of(run.proc.pid)
        wait_for(lambda: site.requests["/js/"] >= 1, what="the page's request")
        uid = Path(f"/proc/{chromium}/status").read_text().split("Uid:")[1].split()[0]
        cmdline = Path(f"/proc/{chromium}/cmdline").read_bytes().split(b"\0")
        site.release()
        assert run.wait(60) == 0, run.stderr
    assert uid == "65534"
    assert b"--no-sandbox" not in cmdline


@pytest.mark.parametrize("flags", [["--screenshot", "view"],
                                   ["--waitUntil", "load"], ["--lang", "de"],
                                   ["--behaviors", "autoscroll"], ["--chromium", "/x"]])
def test_browser_flags_without_browser_are_refused(flags):
    with pytest.raises(ConfigError, match="add --browser"):
        parse_args(["--url", "http://example.com/", *flags])


def test_text_is_taken_in_http_mode_too_and_judged_there():
    parse_args(["--url", "http://example.com/", "--text", "to-pages"])  # the runner passes it always
    with pytest.raises(ConfigError, match="'to-disk' is not one of"):
        parse_args(["--url", "http://example.com/", "--text", "to-disk"])


@pytest.mark.parametrize("flags, message", [
    (["--waitUntil", "soon"], "'soon' is not one of"),
    (["--behaviors", "dance"], "'dance' is not one of"),
    (["--screenshot", "film"], "'film' is not one of"),
    (["--text", "to-disk"], "'to-disk' is not one of"),
    (["--lang", "de_DE!"], "not a language code"),
    (["--chromium", "/nonexistent/chromium"], "no Chromium found"),
    (["--profile", "p"], "not supported"),
])
def test_bad_browser_flags_are_refused(flags, message):
    with pytest.raises(ConfigError, match=message):
        parse_args(["--url", "http://example.com/", "--browser", *flags])


def test_a_bad_browser_flag_exits_4(spawn):
    run = spawn("http://127.0.0.1:9/", "--screenshot", "view")
    assert run.wait(30) == 4
    assert "add --browser" in run.stderr


def test_browser_flags_from_a_config_file(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"seeds": ["http://example.com/"], "browser": True,
                                  "behaviors": ["autoscroll"], "waitUntil": "load",
                                  "text": "to-pages"}))
    parsed = parse_args(["--config", str(config)])
    assert parsed.browser.behaviors == ("autoscroll",) and parsed.browser.wait_until == ("load",)
    assert parsed.browser.text == ("to-pages",)

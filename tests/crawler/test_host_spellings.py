"""Issue 36: the crawl address policy judges the address that is connected to, however the
URL spells it.

A host written with the ideographic, full-width or half-width full stop, full-width or
circled digits, a trailing dot, a number (decimal, octal, hex, short forms) or an
IPv4-mapped IPv6 literal means 127.0.0.5 to aiohttp and Chromium, while `urlsplit()` keeps
the text as a name. A listener on 127.0.0.5 (Linux routes all of 127.0.0.0/8 to lo) counts
every request that reaches it; only 127.0.0.1/32 is opened, so it must count none, whether
the spelling is a seed, a link, a redirect, an image, a stylesheet's url() or the origin of
a robots.txt, in HTTP mode and in browser mode.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from pathlib import Path

import pytest
from archiver_crawler import fetch, netpolicy
from archiver_crawler.browser import find_chromium
from archiver_crawler.fetch import Fetcher, FetchError, FetchRefused
from archiver_crawler.netpolicy import AddressPolicy, AddressRefused, literal_address
from warcio.archiveiterator import ArchiveIterator

from tests.crawler.hosts import PNG, Route, page, serve

FORBIDDEN = "127.0.0.5"
ONLY_127_0_0_1 = "127.0.0.1/32"
SECRET = b"forbidden-listener-secret"

# Every spelling of 127.0.0.5 that a URL parser (yarl, Chromium, the URL standard) maps to it.
SPELLINGS = [
    "127\u30020\u30020\u30025",  # ideographic full stop
    "127\uff0e0\uff0e0\uff0e5",  # full-width full stop
    "127\uff610\uff610\uff615",  # half-width ideographic full stop
    "127\u30020\uff0e0\uff615",  # all three mixed
    "\uff11\uff12\uff17.\uff10.\uff10.\uff15",  # full-width digits
    "\uff11\uff12\uff17\u3002\uff10\u3002\uff10\u3002\uff15",  # full-width digits and dots
    "127.0.0.\u2464",  # circled digit five
    "127.0.0.5.",  # the absolute form
    "127.0.0.5\u3002",  # the absolute form, ideographically
    "2130706437",  # decimal
    "0x7f000005", "0x7f.0.0.5", "0X7F.0.0.5", "0177.0.0.05",  # hex, octal
    "127.5", "127.0.5",  # short forms
    "127\u30025",  # a short form with an ideographic full stop
    "[::ffff:127.0.0.5]", "[::ffff:7f00:5]",  # IPv4-mapped IPv6
]


def refusing() -> AddressPolicy:
    return AddressPolicy(netpolicy.parse_networks([ONLY_127_0_0_1]))


@pytest.fixture
def forbidden():
    """A listener on 127.0.0.5 whose every answer carries SECRET; `.hits` counts requests."""
    secret_page = page("secret", SECRET.decode())
    routes = {"/": secret_page, "/x": secret_page, "/robots.txt": Route(
        body=b"User-agent: *\nAllow: /\n# " + SECRET, content_type="text/plain"),
        "/img.png": Route(body=PNG + SECRET, content_type="image/png"),
        "/bg.png": Route(body=PNG + SECRET, content_type="image/png"),
        "/style.css": Route(body=b"/* " + SECRET + b" */", content_type="text/css")}
    with serve(routes, host=FORBIDDEN) as served:
        yield served


def spelled(spelling: str, port: int, path: str = "/x") -> str:
    return f"http://{spelling}:{port}{path}"


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_is_read_as_the_address_it_means(spelling):
    assert literal_address(spelling) == ipaddress.ip_address(FORBIDDEN) or literal_address(
        spelling) == ipaddress.ip_address("::ffff:" + FORBIDDEN)


def fetch_each(urls: list[str], policy: AddressPolicy) -> list:
    async def run():
        fetcher = Fetcher("test", 5, 1, policy=policy)
        results = []
        try:
            for url in urls:
                try:
                    results.append(await fetcher.fetch(url))
                except FetchError as exc:  # FetchRefused among them
                    results.append(exc)
        finally:
            await fetcher.close()
        return results

    return asyncio.run(run())


def test_the_fetcher_refuses_every_spelling_before_sending_anything(forbidden):
    results = fetch_each([spelled(s, forbidden.port) for s in SPELLINGS], refusing())
    assert forbidden.hits == []
    assert [type(r) for r in results] == [FetchRefused] * len(SPELLINGS)
    assert all("127.0.0.5" in str(r) and "loopback" in str(r) for r in results)


def test_the_connector_refuses_what_the_policy_refuses_whatever_resolved_it(
        forbidden, monkeypatch):
    """With the URL check blinded (every host taken for a name) and a resolver that answers
    127.0.0.5 without asking the policy, the connection itself is still refused."""
    monkeypatch.setattr(fetch, "literal_address", lambda host: None)

    class Blind(fetch.PolicyResolver):
        async def resolve(self, host, port=0, family=socket.AF_INET):
            return [{"hostname": host, "host": FORBIDDEN, "port": port,
                     "family": socket.AF_INET, "proto": 0, "flags": 0}]

    monkeypatch.setattr(fetch, "PolicyResolver", Blind)
    urls = [spelled(s, forbidden.port) for s in SPELLINGS] + [
        spelled("anything.test", forbidden.port)]
    results = fetch_each(urls, refusing())
    assert forbidden.hits == []
    # aiohttp itself refuses to connect to a numeric host other than a.b.c.d (`2130706437`,
    # `127.5`, `127.0.0.5.`); every other one, the Unicode ones, the IPv6 ones and the name,
    # reached the connector, whose socket check refused it.
    refused = {url for url, r in zip(urls, results, strict=True) if isinstance(r, FetchRefused)}
    others = [str(r) for r in results if not isinstance(r, FetchRefused)]
    assert [text for text in others if "is not a canonical IPv4 address" not in text] == []
    assert {urls[0], urls[1], urls[2], urls[-1], urls[-2], urls[-3]} <= refused
    assert all("127.0.0.5" in str(r) and "a loopback address" in str(r) for r in results
               if isinstance(r, FetchRefused))


def test_the_connectors_socket_check_refuses_and_allows_by_the_policy():
    open_socket = fetch.policy_socket_factory(refusing())
    with pytest.raises(AddressRefused, match="127.0.0.5 is a loopback address"):
        open_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", (FORBIDDEN, 80)))
    with pytest.raises(AddressRefused, match="embeds 127.0.0.5"):
        open_socket((socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::ffff:7f00:5", 80, 0, 0)))
    open_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))).close()


# --- whole crawls -------------------------------------------------------------------------


def hostile_site(port: int) -> dict[str, Route]:
    """A site on 127.0.0.1 pointing at the forbidden listener in every spelling and way."""
    links = "".join(f'<a href="{spelled(s, port)}">l</a>' for s in SPELLINGS)
    images = "".join(f'<img src="{spelled(s, port, "/img.png")}">' for s in SPELLINGS)
    backgrounds = " ".join(f'.b{i} {{ background: url("{spelled(s, port, "/bg.png")}") }}'
                           for i, s in enumerate(SPELLINGS))
    sheets = "".join(f'<link rel="stylesheet" href="{spelled(s, port, "/style.css")}">'
                     for s in SPELLINGS)
    divs = "".join(f'<div class="b{i}">b</div>' for i in range(len(SPELLINGS)))
    redirects = "".join(f'<a href="/go/{i}">r</a>' for i in range(len(SPELLINGS)))
    body = (f"<style>{backgrounds}</style>{sheets}{links}{images}{divs}{redirects}"
            '<link rel="stylesheet" href="/site.css">')
    routes = {"/": page("Home", body),
              "/site.css": Route(body=backgrounds.encode(), content_type="text/css")}
    for i, s in enumerate(SPELLINGS):
        routes[f"/go/{i}"] = Route(302, headers={"Location": spelled(s, port)})
    return routes


def wacz_bodies(collection_dir: Path) -> list[tuple[str, bytes]]:
    found = []
    for path in sorted((collection_dir / "archive").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                found.append((record.rec_headers.get_header("WARC-Target-URI") or "",
                              record.content_stream().read()))
    return found


def nothing_from_the_forbidden_listener(collection_dir: Path) -> None:
    found = wacz_bodies(collection_dir)
    assert found, "the crawl archived nothing at all"
    assert [uri for uri, body in found if SECRET in body] == []


def seeds(port: int) -> list[str]:
    return [arg for s in SPELLINGS for arg in ("--url", spelled(s, port, "/"))]


def test_an_http_mode_crawl_reaches_no_spelling_of_a_forbidden_address(crawl, forbidden):
    with serve(hostile_site(forbidden.port)) as site:
        code, collection = crawl(site.url("/"), "--scopeType", "any", "--useRobots",
                                 "--limit", "200", *seeds(forbidden.port), allow=ONLY_127_0_0_1)
    assert code == 0
    assert "/" in site.hits and "/site.css" in site.hits
    assert forbidden.hits == []
    nothing_from_the_forbidden_listener(collection.dir)


@pytest.mark.skipif(find_chromium() is None, reason="no Chromium (apt-get install chromium)")
def test_a_browser_mode_crawl_reaches_no_spelling_of_a_forbidden_address(spawn, forbidden):
    with serve(hostile_site(forbidden.port)) as site:
        run = spawn(site.url("/"), "--browser", "--workers", "2", "--pageLoadTimeout", "20",
                    "--waitUntil", "load", "--scopeType", "any", "--useRobots", "--limit", "200",
                    *seeds(forbidden.port), allow=ONLY_127_0_0_1)
        assert run.wait(120) == 0, run.stderr
    assert "/" in site.hits
    assert forbidden.hits == []
    nothing_from_the_forbidden_listener(run.collection.dir)

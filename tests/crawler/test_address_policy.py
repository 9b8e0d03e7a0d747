"""The crawl address policy: which addresses a crawl may fetch, checked on the resolved
address before any connection, and pinned against DNS rebinding.

Real traffic goes to 127.0.0.1 only. Refused destinations (169.254.169.254, 127.0.0.2,
IPv6 forms) are never connected to: `watch_connections` records every connection attempt
of this process and refuses, before the kernel sees it, anything but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from pathlib import Path

import pytest
from archiver_crawler import fetch, netpolicy
from archiver_crawler.cli import main
from archiver_crawler.config import parse_args
from archiver_crawler.errors import ConfigError
from archiver_crawler.fetch import Fetcher, FetchRefused
from archiver_crawler.netpolicy import AddressPolicy, NotAnAddress, literal_address

from tests.crawler.hosts import (
    PNG,
    FakeResolver,
    Route,
    page,
    serve,
    warc_targets,
    watch_connections,
)

ONLY_127_0_0_1 = "127.0.0.1/32"
REASON = "refused by the crawl address policy: "


def opened_by(network: str) -> str:
    """The end of a refusal: how to open the refused address's network."""
    return f" (open it with ARCHIVER_CRAWL_ALLOW_NETWORKS={network}, the crawler's --allowNetworks)"
ip = ipaddress.ip_address


def failed(r, crawl_id: str = "crawl1") -> dict[str, str]:
    return {entry["url"]: entry["reason"]
            for entry in map(json.loads, r.lrange(f"{crawl_id}:f", 0, -1))}


def archived(collection) -> list[str]:
    archive = collection.dir / "archive"
    return warc_targets(archive) if archive.exists() else []


# --- the rules ----------------------------------------------------------------------------

LOCAL = [
    ("127.0.0.1", "loopback"), ("127.0.0.2", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("fe80::1%eth0", "scoped (link-local)"),
    ("::ffff:169.254.169.254", "an address that embeds 169.254.169.254, a link-local"),
    ("64:ff9b::a9fe:a9fe", "embeds 169.254.169.254"),
    ("fd00:ec2::254", "unique-local (private)"), ("10.1.2.3", "private"),
    ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("100.64.0.1", "carrier-grade NAT"),
    ("224.0.0.251", "multicast"), ("ff02::1", "multicast"), ("0.0.0.0", "unspecified"),
    ("::", "unspecified"), ("240.0.0.1", "reserved"), ("255.255.255.255", "broadcast"),
]


@pytest.mark.parametrize(("address", "reason"), LOCAL)
def test_the_default_policy_refuses_every_local_address_class(address, reason):
    problem = AddressPolicy().problem(ip(address))
    assert problem is not None and reason in problem


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                                     "::ffff:93.184.215.14"])
def test_public_addresses_pass_the_default_policy(address):
    assert AddressPolicy().problem(ip(address)) is None


def test_an_allowed_network_opens_that_network_and_nothing_else():
    policy = AddressPolicy(netpolicy.parse_networks([ONLY_127_0_0_1, "fd00:ec2::/32"]))
    assert policy.problem(ip("127.0.0.1")) is None
    assert policy.problem(ip("::ffff:127.0.0.1")) is None  # the same destination
    assert policy.problem(ip("fd00:ec2::254")) is None
    assert "loopback" in policy.problem(ip("127.0.0.2"))
    assert "loopback" in policy.problem(ip("::1"))
    assert "link-local" in policy.problem(ip("169.254.169.254"))


def test_this_hosts_own_addresses_are_refused_even_when_they_are_public(tmp_path):
    (tmp_path / "fib_trie").write_text(
        "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 8.8.4.0\n        /24 link UNICAST\n"
        "     |-- 8.8.4.4\n        /32 host LOCAL\n     |-- 8.8.4.255\n"
        "        /32 link BROADCAST\n")
    (tmp_path / "if_inet6").write_text(
        "2606280000000000000000000000abcd 02 40 00 80     eth0\n"
        "00000000000000000000000000000001 01 80 10 80       lo\n")
    own = netpolicy.own_addresses(tmp_path)
    assert own == {ip("8.8.4.4"), ip("2606:2800::abcd"), ip("::1")}
    policy = AddressPolicy(own=own)
    assert policy.problem(ip("8.8.4.4")) == netpolicy.OWN_ADDRESS
    assert policy.problem(ip("::ffff:8.8.4.4")) == netpolicy.OWN_ADDRESS
    assert policy.problem(ip("2606:2800::abcd")) == netpolicy.OWN_ADDRESS
    assert policy.problem(ip("8.8.4.255")) is None  # a neighbour, not this host
    assert AddressPolicy(netpolicy.parse_networks(["8.8.4.0/24"]), own).problem(
        ip("8.8.4.4")) is None


def test_this_machine_knows_its_loopback_address_as_its_own():
    assert ip("127.0.0.1") in netpolicy.own_addresses()


@pytest.mark.parametrize(("host", "address"), [
    ("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"), ("0177.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"), ("017700000001", "127.0.0.1"), ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("2852039166", "169.254.169.254"), ("[::ffff:a9fe:a9fe]", "::ffff:169.254.169.254"),
    ("127.0.0.1.", "127.0.0.1"),
])
def test_numeric_spellings_are_read_as_the_address_they_mean(host, address):
    assert literal_address(host) == ip(address)


@pytest.mark.parametrize("host", ["1.2.3.999", "0x1g.1", "1.2.3.4.5", "[::zz]"])
def test_a_host_that_looks_like_an_address_and_is_none_is_refused(host):
    with pytest.raises(NotAnAddress):
        literal_address(host)


def test_names_are_not_addresses():
    assert literal_address("example.org") is None and literal_address("1a.example") is None


@pytest.mark.parametrize(("entry", "problem"), [
    ("127.0.0.1/8", "did you mean 127.0.0.0/8?"), ("localhost", "not a network in CIDR form"),
    ("10.0.0.0/33", "not a network in CIDR form"),
])
def test_a_malformed_allow_entry_says_what_is_wrong(entry, problem):
    with pytest.raises(ValueError, match=problem.replace("?", r"\?")):
        netpolicy.parse_networks([entry])


# --- configuration ------------------------------------------------------------------------


def test_allow_networks_come_from_repeated_or_comma_separated_options_and_the_config_file(tmp_path):
    config = parse_args(["--url", "http://example.org/", "--allowNetworks", "127.0.0.1/32, ::1",
                         "--allowNetworks", "10.0.0.0/8"], env={})
    assert [str(n) for n in config.allow_networks] == ["127.0.0.1/32", "::1/128", "10.0.0.0/8"]
    path = tmp_path / "crawler.json"
    path.write_text(json.dumps({"seeds": ["http://example.org/"],
                                "allowNetworks": ["192.168.0.0/16"]}))
    config = parse_args(["--config", str(path)], env={})
    assert [str(n) for n in config.allow_networks] == ["192.168.0.0/16"]
    assert parse_args(["--url", "http://example.org/"], env={}).allow_networks == ()


@pytest.mark.parametrize("value", ["127.0.0.1/8", "nonsense", [1]])
def test_a_malformed_allow_network_is_an_invalid_configuration(tmp_path, value):
    path = tmp_path / "crawler.json"
    path.write_text(json.dumps({"seeds": ["http://example.org/"], "allowNetworks": value}))
    with pytest.raises(ConfigError, match="allowNetworks"):
        parse_args(["--config", str(path)], env={})


def test_the_crawler_exits_4_on_a_malformed_allow_network(capsys):
    assert main(["--url", "http://example.org/", "--allowNetworks", "127.0.0.1/8"]) == 4
    assert "did you mean 127.0.0.0/8?" in capsys.readouterr().err


# --- fetching: checked on the resolved address, pinned ------------------------------------


def fetch_all(resolver: FakeResolver, *urls: str) -> list:
    """Each URL's Fetched, or the FetchRefused it raised, by a Fetcher that allows only
    127.0.0.1 and resolves with `resolver`. The DNS cache is cleared after each URL, so
    every URL is a new lookup (as once its TTL ran out)."""

    async def run():
        fetcher = Fetcher("test", 5, 1, resolver=resolver, policy=AddressPolicy(
            netpolicy.parse_networks([ONLY_127_0_0_1])))
        results = []
        try:
            for url in urls:
                try:
                    results.append(await fetcher.fetch(url))
                except FetchRefused as exc:
                    results.append(exc)
                fetcher.session.connector.clear_dns_cache()
        finally:
            await fetcher.close()
        return results

    return asyncio.run(run())


@pytest.fixture
def origin():
    # Connection: close, so that the next request needs a new connection.
    close = {"Connection": "close"}
    with serve({"/": Route(body=b"home", headers=close),
                "/x": Route(body=b"x", headers=close)}) as served:
        yield served


def test_a_name_rebound_to_a_refused_address_is_never_connected_to(monkeypatch, origin):
    """DNS rebinding: the first answer passes, the second names the metadata address."""
    connections = watch_connections(monkeypatch)
    resolver = FakeResolver({"rebind.test": [["127.0.0.1"], ["169.254.169.254"]]})
    first, second = fetch_all(resolver, f"http://rebind.test:{origin.port}/",
                              f"http://rebind.test:{origin.port}/x")
    assert first.status == 200 and origin.hits == ["/"]
    assert isinstance(second, FetchRefused)
    assert str(second) == (REASON + "rebind.test resolves to 169.254.169.254, which is a "
                                    "link-local address" + opened_by("169.254.169.254/32"))
    assert resolver.lookups == ["rebind.test", "rebind.test"]  # one lookup per connection
    assert connections == [("127.0.0.1", origin.port)]


def test_a_name_with_one_refused_address_among_allowed_ones_is_refused_whole(monkeypatch, origin):
    connections = watch_connections(monkeypatch)
    resolver = FakeResolver({"mixed.test": [["127.0.0.1", "169.254.169.254"]]})
    (result,) = fetch_all(resolver, f"http://mixed.test:{origin.port}/")
    assert isinstance(result, FetchRefused) and "169.254.169.254" in str(result)
    assert connections == [] and origin.hits == []


@pytest.mark.parametrize(("url", "reason"), [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
    ("http://[::ffff:169.254.169.254]/", "::ffff:a9fe:a9fe is an address that embeds "
                                         "169.254.169.254, a link-local address"),
    ("http://[fd00:ec2::254]/latest/", "fd00:ec2::254 is a unique-local (private) address"),
    ("http://[fe80::a9fe:a9fe%25eth0]/", "is a scoped (link-local) address"),
    ("http://0xa9fea9fe/", "169.254.169.254 is a link-local address"),
    ("http://2130706434/", "127.0.0.2 is a loopback address"),
    ("http://0x7f.2/", "127.0.0.2 is a loopback address"),
    ("http://[::1]/", "::1 is a loopback address"),
    ("http://1.2.3.999/", "'1.2.3.999' is not a valid IPv4 address"),
])
def test_addresses_written_in_the_url_are_judged_before_any_lookup_or_connection(
        monkeypatch, url, reason):
    connections = watch_connections(monkeypatch)
    resolver = FakeResolver({})
    (result,) = fetch_all(resolver, url)
    assert isinstance(result, FetchRefused) and str(result).startswith(REASON)
    assert reason in str(result)
    assert connections == [] and resolver.lookups == []


def test_without_a_policy_the_fetcher_still_refuses_local_addresses(monkeypatch, origin):
    connections = watch_connections(monkeypatch)

    async def run():
        fetcher = Fetcher("test", 5, 1)
        try:
            await fetcher.fetch(origin.url("/"))
        finally:
            await fetcher.close()

    with pytest.raises(FetchRefused, match="127.0.0.1 is"):
        asyncio.run(run())
    assert connections == [] and origin.hits == []


# --- whole crawls ---------------------------------------------------------------------------


def names(monkeypatch, table: dict[str, list[list[str]]]) -> FakeResolver:
    """Make the crawler's resolver answer from `table` (no real DNS in these tests)."""
    resolver = FakeResolver(table)
    monkeypatch.setattr(fetch, "DefaultResolver", lambda: resolver)
    return resolver


def test_a_seed_at_the_metadata_address_is_refused_without_a_connection(crawl, r, monkeypatch):
    connections = watch_connections(monkeypatch)
    code, collection = crawl("http://169.254.169.254/latest/meta-data/", allow=ONLY_127_0_0_1)
    assert code == 9  # no page succeeded
    assert failed(r) == {"http://169.254.169.254/latest/meta-data/":
                         REASON + "169.254.169.254 is a link-local address" + opened_by("169.254.169.254/32")}
    assert archived(collection) == []
    assert {host for host, _ in connections} == {"127.0.0.1"}  # Redis only


def test_a_seed_whose_name_resolves_to_the_metadata_address_is_refused(crawl, r, monkeypatch):
    connections = watch_connections(monkeypatch)
    names(monkeypatch, {"metadata.test": [["169.254.169.254"]]})
    code, collection = crawl("http://metadata.test/latest/", allow=ONLY_127_0_0_1)
    assert code == 9
    assert failed(r) == {"http://metadata.test/latest/": REASON + "metadata.test resolves to "
                         "169.254.169.254, which is a link-local address" + opened_by("169.254.169.254/32")}
    assert archived(collection) == []
    assert {host for host, _ in connections} == {"127.0.0.1"}


def test_an_image_on_a_local_address_that_is_not_allowed_is_refused_and_not_archived(
        crawl, r, monkeypatch, caplog):
    connections = watch_connections(monkeypatch)
    with serve({"/secret.png": Route(body=PNG, content_type="image/png"),
                "/admin/": page("Admin", "secret")}, host="127.0.0.2") as other:
        routes = {"/": page("Home", f'<img src="{other.url("/secret.png")}">'
                                    f'<img src="/logo.png"><a href="{other.url("/admin/")}">a</a>'),
                  "/logo.png": Route(body=PNG, content_type="image/png")}
        with serve(routes) as site:
            code, collection = crawl(site.url("/"), "--scopeType", "any", allow=ONLY_127_0_0_1)

    assert code == 0
    assert other.hits == [] and ("127.0.0.2", other.port) not in connections
    targets = archived(collection)
    assert site.url("/") in targets and site.url("/logo.png") in targets
    assert not [url for url in targets if "127.0.0.2" in url]
    refused = REASON + "127.0.0.2 is a loopback address" + opened_by("127.0.0.2/32")
    # An error line: in the log file, and on <id>:e with --logErrorsToRedis (see below).
    assert f"requisite refused: {other.url('/secret.png')} ({refused})" in [
        record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert failed(r) == {other.url("/admin/"): refused}  # a link is a page: on <id>:f
    assert collection.page_urls == {site.url("/")}


def test_a_redirect_from_an_allowed_server_to_a_refused_address_is_refused(crawl, r, monkeypatch):
    connections = watch_connections(monkeypatch)
    names(monkeypatch, {"rebound.test": [["10.0.0.7"]]})
    meta = "http://169.254.169.254/latest/meta-data/iam/"
    with serve({"/": page("Home", "home")}, host="127.0.0.2") as other:
        routes = {
            "/": page("Start", '<a href="/to-other">o</a><a href="/to-name">n</a>'),
            "/to-other": Route(302, headers={"Location": other.url("/")}),
            "/to-name": Route(302, headers={"Location": "http://rebound.test/internal"}),
            "/to-metadata": Route(301, headers={"Location": meta}),
        }
        with serve(routes) as site:
            code, collection = crawl(site.url("/"), "--scopeType", "any",
                                     "--url", site.url("/to-metadata"), allow=ONLY_127_0_0_1)

    assert code == 0
    assert failed(r) == {
        other.url("/"): REASON + "127.0.0.2 is a loopback address" + opened_by("127.0.0.2/32"),
        "http://rebound.test/internal": REASON + "rebound.test resolves to 10.0.0.7, which is "
                                                 "a private address" + opened_by("10.0.0.7/32"),
        meta: REASON + "169.254.169.254 is a link-local address" + opened_by("169.254.169.254/32"),
    }
    targets = archived(collection)
    assert {site.url("/to-other"), site.url("/to-name"), site.url("/to-metadata")} <= set(targets)
    assert not [url for url in targets if "127.0.0.2" in url or "169.254" in url
                or "rebound" in url]
    assert other.hits == [] and {host for host, _ in connections} == {"127.0.0.1"}


def test_without_an_allow_list_a_crawl_of_a_loopback_site_is_refused(crawl, r, monkeypatch):
    connections = watch_connections(monkeypatch)
    with serve({"/": page("Home", "home")}) as site:
        code, collection = crawl(site.url("/"), allow=None)
    assert code == 9 and site.hits == []
    assert failed(r) == {site.url("/"): REASON + "127.0.0.1 is a loopback address" + opened_by("127.0.0.1/32")}
    assert archived(collection) == [] and ("127.0.0.1", site.port) not in connections


def test_the_console_script_refuses_a_local_seed_and_says_why_in_redis(spawn, r):
    with serve({"/": page("Home", "home")}, host="127.0.0.2") as other:
        crawler = spawn(other.url("/"), "--logErrorsToRedis", allow=ONLY_127_0_0_1)
        assert crawler.wait() == 9, crawler.stderr
    assert other.hits == []
    assert failed(r) == {other.url("/"): REASON + "127.0.0.2 is a loopback address" + opened_by("127.0.0.2/32")}
    errors = [json.loads(line) for line in r.lrange("crawl1:e", 0, -1)]
    assert any(REASON + "127.0.0.2" in e["message"] for e in errors)
    assert not Path(crawler.collection.dir / "archive").exists() or archived(
        crawler.collection) == []


def test_a_robots_txt_redirect_to_a_refused_address_is_not_followed(crawl, r, monkeypatch):
    connections = watch_connections(monkeypatch)
    with serve({"/": page("Home", '<a href="/a">a</a>'), "/a": page("A", "a"),
                "/robots.txt": Route(302, headers={
                    "Location": "http://169.254.169.254/latest/meta-data/"})}) as site:
        code, collection = crawl(site.url("/"), "--useRobots", allow=ONLY_127_0_0_1)
    assert code == 0 and collection.page_urls == {site.url("/"), site.url("/a")}
    assert "/robots.txt" in site.hits
    assert {host for host, _ in connections} == {"127.0.0.1"}


def test_robots_txt_redirects_within_allowed_addresses_are_still_followed(crawl, r):
    with serve({"/": page("Home", '<a href="/a">a</a>'), "/a": page("A", "a"),
                "/robots.txt": Route(301, headers={"Location": "/real-robots.txt"}),
                "/real-robots.txt": Route(body=b"User-agent: *\nDisallow: /a\n",
                                          content_type="text/plain")}) as site:
        code, collection = crawl(site.url("/"), "--useRobots", allow=ONLY_127_0_0_1)
    assert code == 0 and collection.page_urls == {site.url("/")}
    assert "/a" not in site.hits

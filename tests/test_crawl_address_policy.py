"""The crawl address policy as archiver configures it: ARCHIVER_CRAWL_ALLOW_NETWORKS, the
`allowNetworks` key of the crawler's config file, one module of address rules shared with
the webhooks, and whole crawls run by the runner (local process and container) in which a
page's image points at a local address that is not allowed.

Real traffic goes to 127.0.0.1 only; the not-allowed server listens on 127.0.0.2 to prove
that nothing reaches it.
"""

from __future__ import annotations

import ipaddress
import shutil
import tempfile
from pathlib import Path

import pytest
import redis
from archiver_crawler import netpolicy

from archiver import conf
from archiver.errors import ConfigError
from crawls import ssrf
from crawls.config import CrawlConfig
from crawls.lease import db_now
from crawls.models import Crawl, CrawlLog, CrawlStatus, Org, Snapshot, SnapshotStatus
from runner.daemon import Runner
from runner.launchers import DockerLauncher, LocalLauncher, install_id
from runner.progress import ProgressStore
from runner.redis_server import RedisEndpoint
from tests.crawler.hosts import PNG, Route, page, serve, warc_targets
from tests.runner.helpers import is_final
from tests.waiting import drive

VARIABLE = "ARCHIVER_CRAWL_ALLOW_NETWORKS"
REFUSED = ("refused by the crawl address policy: 127.0.0.2 is a loopback address "
           "(open it with ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.2/32, the crawler's --allowNetworks)")


# --- the setting --------------------------------------------------------------------------


def test_the_setting_is_a_comma_separated_list_of_networks():
    settings = conf.from_environ({VARIABLE: " 127.0.0.1/32, fd00:ec2::/32,10.0.0.0/8 "})
    assert settings.crawl_allow_networks == ("127.0.0.1/32", "fd00:ec2::/32", "10.0.0.0/8")
    assert conf.from_environ({}).crawl_allow_networks == ()


@pytest.mark.parametrize(("value", "problem"), [
    ("127.0.0.1/8", "did you mean 127.0.0.0/8?"), ("localhost", "not a network in CIDR form"),
    ("10.0.0.0/8,*", "'*' is not a network"),
])
def test_a_malformed_setting_stops_archiver_naming_the_variable(value, problem):
    with pytest.raises(ConfigError) as info:
        conf.from_environ({VARIABLE: value})
    assert str(info.value).startswith(VARIABLE) and problem in str(info.value)


def test_the_crawlers_config_file_carries_the_allowed_networks(monkeypatch):
    config = CrawlConfig(seeds=["https://example.org/"])
    allowed = conf.from_environ({VARIABLE: "127.0.0.1/32,::1"})
    monkeypatch.setattr(conf, "get", lambda: allowed)
    assert config.crawler_config(None)["allowNetworks"] == ["127.0.0.1/32", "::1/128"]
    monkeypatch.setattr(conf, "get", lambda: conf.from_environ({}))
    assert "allowNetworks" not in config.crawler_config(None)  # the default: nothing local


def test_the_test_suite_opens_loopback_for_its_local_sites():
    assert conf.get().crawl_allow_networks == ("127.0.0.0/8",)


@pytest.mark.parametrize(("host", "address", "refusal"), [
    ("127.0.0.1", "127.0.0.1", "127.0.0.1 is a loopback address (open it with "
     "ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.1/32, the crawler's --allowNetworks)"),
    ("[::1]", "::1", "::1 is a loopback address (open it with "
     "ARCHIVER_CRAWL_ALLOW_NETWORKS=::1/128, the crawler's --allowNetworks)"),
    ("intranet.test", "::ffff:10.1.2.3", "intranet.test resolves to ::ffff:a01:203, which is an "
     "address that embeds 10.1.2.3, a private address (open it with "
     "ARCHIVER_CRAWL_ALLOW_NETWORKS=10.1.2.3/32, the crawler's --allowNetworks)"),
])
def test_a_refused_address_names_the_setting_that_opens_its_network(host, address, refusal):
    with pytest.raises(netpolicy.AddressRefused) as info:
        netpolicy.AddressPolicy().check(host, address)
    assert str(info.value) == "refused by the crawl address policy: " + refusal
    network = str(info.value).split(f"{VARIABLE}=")[1].split(",")[0]
    assert conf.from_environ({VARIABLE: network}).crawl_allow_networks == (network,)  # as printed


# --- one module of address rules ----------------------------------------------------------


def test_webhooks_and_crawls_judge_addresses_with_the_same_rules():
    assert ssrf.address_problem is netpolicy.address_problem
    assert ssrf.parse_ipv4("0x7f.1") == netpolicy.parse_ipv4("0x7f.1")
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "100.64.0.1"):
        ip = ipaddress.ip_address(address)
        assert netpolicy.AddressPolicy().problem(ip) == ssrf.address_problem(ip) is not None


# --- whole crawls through the runner ------------------------------------------------------


@pytest.fixture
def data_dir():
    path = Path(tempfile.mkdtemp(prefix="apol-", dir="/tmp"))  # short: a socket path fits
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def store(redis_server):
    store = ProgressStore(RedisEndpoint(host="127.0.0.1", port=redis_server.port,
                                        databases=redis_server.databases))
    yield store
    store.close()
    # The runner allocates databases from 1 up: leave them empty for the next test.
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    for db in range(1, 12):
        client.execute_command("SELECT", db)
        client.flushdb()
    client.close()


def make_launcher(kind: str, settings: conf.Settings, request):
    if kind == "local":
        return LocalLauncher(settings)
    request.getfixturevalue("docker_client")
    return DockerLauncher(settings)


@pytest.mark.django_db
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_a_crawl_whose_image_points_at_a_local_address_not_allowed_archives_nothing_from_it(
        kind, data_dir, store, monkeypatch, request):
    image = request.getfixturevalue("crawler_image") if kind == "docker" else None
    settings = conf.Settings(
        data_dir=data_dir, launcher=kind, poll_interval=0.2, lease_seconds=5,
        crawl_allow_networks=("127.0.0.1/32",), host_rate=0.0,
        **({"crawler_image": image} if image else {}))
    monkeypatch.setattr(conf, "get", lambda: settings)  # what crawler_config reads
    launcher = make_launcher(kind, settings, request)
    runner = Runner(settings, launcher, store, clock=db_now, host_check=lambda crawl: None)
    runner.register(runner.clock())
    org = Org.objects.get_or_create(slug="default")[0]
    try:
        with serve({"/secret.png": Route(body=PNG, content_type="image/png"),
                    "/admin/": page("Admin", "secret")}, host="127.0.0.2") as other:
            home = page("Home", f'<img src="{other.url("/secret.png")}"><img src="/logo.png">'
                                f'<a href="{other.url("/admin/")}">admin</a>')
            with serve({"/": home, "/logo.png": Route(body=PNG, content_type="image/png")}
                       ) as site:
                crawl = Crawl.create(org, CrawlConfig(seeds=[site.url("/")], scope_type="any"))
                drive(runner, is_final(crawl), timeout=120)
    finally:
        _clean_up(runner, launcher, settings, request)

    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    assert other.hits == []
    (record,) = crawl.files.all()
    targets = warc_targets(settings.data_dir / record.path)
    assert site.url("/") in targets and site.url("/logo.png") in targets
    assert [url for url in targets if "127.0.0.2" in url] == []
    refusals = CrawlLog.objects.filter(crawl=crawl, message__contains=REFUSED)
    assert {line.details.get("url") for line in refusals if "requisite" in line.message} == {
        other.url("/secret.png")}
    failed = Snapshot.objects.get(crawl=crawl, url=other.url("/admin/"))
    assert (failed.status, failed.error) == (SnapshotStatus.FAILED, REFUSED)


def _clean_up(runner, launcher, settings, request) -> None:
    launcher.close()
    if isinstance(launcher, LocalLauncher):
        for instance in launcher.list():
            launcher.remove(instance.ref)
        return
    client = request.getfixturevalue("docker_client")
    label = f"archiver.install={install_id(settings)}"
    for container in client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)


# --- seeds at the door: every spelling of an address (issue 36) ----------------------------

SPELLINGS_OF_127_0_0_5 = ["127\u30020\u30020\u30025", "127\uff0e0\uff0e0\uff0e5",
                          "127\uff610\uff610\uff615", "\uff11\uff12\uff17.0.0.5", "127.0.0.5.",
                          "[::ffff:127.0.0.5]"]


@pytest.mark.parametrize("host", SPELLINGS_OF_127_0_0_5)
def test_a_seed_at_a_refused_address_is_refused_at_the_door_in_any_spelling(monkeypatch, host):
    only = conf.from_environ({VARIABLE: "127.0.0.1/32"})
    monkeypatch.setattr(conf, "get", lambda: only)
    with pytest.raises(ConfigError, match=r"refused by the crawl address policy: .*127\.0\.0\.5.*"
                                          r"a loopback address \(open it with "
                                          r"ARCHIVER_CRAWL_ALLOW_NETWORKS=127\.0\.0\.5/32"):
        CrawlConfig.parse(seeds=[f"http://{host}:8225/x"])
    assert CrawlConfig.parse(seeds=["http://127.0.0.1:8225/x"]).seeds == ["http://127.0.0.1:8225/x"]


def test_a_stored_seed_stays_readable_whatever_the_policy_says_now(monkeypatch):
    monkeypatch.setattr(conf, "get", lambda: conf.from_environ({}))
    stored = CrawlConfig.model_validate({"seeds": ["http://127\u30020\u30020\u30025/"]})
    assert stored.seeds == ["http://127\u30020\u30020\u30025/"]


@pytest.mark.parametrize("host", SPELLINGS_OF_127_0_0_5[:-2])
def test_webhooks_read_unicode_spellings_as_the_address_they_mean(host):
    assert str(ssrf.parse_webhook_url(f"https://{host}/in").ip) == "127.0.0.5"

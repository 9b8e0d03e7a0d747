"""A failed crawl's reason says its cause first (a table cuts it at ~40 characters); the
instance and its exit code are in the error's detail. A real crawler process, the private
Redis, a port on 127.0.0.1 where nothing listens, and a site on 127.0.0.2, which the crawl
address policy refuses (nothing is sent there)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from archiver import conf
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.crawler_log import cause
from runner.launchers import hostname
from tests.crawler.hosts import page, serve
from tests.ports import refused_port
from tests.runner.helpers import is_final
from tests.waiting import drive

pytestmark = pytest.mark.django_db


def test_a_crawl_of_a_refused_port_fails_with_connection_refused_first(make_runner, make_crawl):
    with refused_port() as port:
        crawl = make_crawl(f"http://127.0.0.1:{port}/")
        drive(make_runner(clock=db_now), is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.FAILED
    assert crawl.error == f"connection refused: 127.0.0.1:{port} (no page archived, exit 9)"
    assert crawl.error_detail.startswith(
        f"crawler instance {hostname(crawl.pk, 0)} ended with no page archived (exit 9): "
        f"page load failed: http://127.0.0.1:{port}/ (")
    summary = crawl.summary()  # the API's and the webhooks' payload
    assert (summary["error"], summary["error_detail"]) == (crawl.error, crawl.error_detail)
    out = io.StringIO()
    call_command("status", "--json", stdout=out)
    assert json.loads(out.getvalue())[0]["error"] == crawl.error


def test_a_crawl_of_an_address_the_policy_refuses_fails_with_the_policy_first(
        make_runner, make_crawl, settings, monkeypatch):
    """Its seed was let in by a wider policy (another shell's ARCHIVER_CRAWL_ALLOW_NETWORKS,
    or one narrowed since): the crawler refuses it."""
    only_this_host = settings.model_copy(update={"crawl_allow_networks": ("127.0.0.1/32",)})
    monkeypatch.setattr(conf, "get", lambda: only_this_host)  # what the crawler's config reads
    with serve({"/": page("Other", "not to be archived")}, host="127.0.0.2") as other:
        crawl = make_crawl(other.url("/"))
        drive(make_runner(settings=only_this_host, clock=db_now), is_final(crawl))

    crawl.refresh_from_db()
    assert other.hits == []
    assert crawl.status == CrawlStatus.FAILED
    assert crawl.error == ("refused by the crawl address policy: 127.0.0.2 is a loopback address "
                           "(open it with ARCHIVER_CRAWL_ALLOW_NETWORKS=127.0.0.2/32, the crawler's "
                           "--allowNetworks) (no page archived, exit 9)")
    assert crawl.error_detail.startswith(
        f"crawler instance {hostname(crawl.pk, 0)} ended with no page archived (exit 9): ")


@pytest.mark.parametrize(("words", "expected"), [
    ("page load failed: http://nx.invalid/ (ClientConnectorDNSError: Cannot connect to host "
     "nx.invalid:80 ssl:default [Name or service not known])", "DNS lookup failed: nx.invalid"),
    ("page load failed: http://10.0.0.1/ (refused by the crawl address policy: 10.0.0.1 is a "
     "private network)", "refused by the crawl address policy: 10.0.0.1 is a private network"),
    ("Page Load Failed: net::ERR_NAME_NOT_RESOLVED", "DNS lookup failed"),
    ("Page Load Failed: net::ERR_TIMED_OUT", "timed out"),
    ("Seed list is not valid. Quitting", "Seed list is not valid. Quitting"),
])
def test_the_cause_is_read_from_the_crawlers_words(words, expected):
    assert cause(words) == expected

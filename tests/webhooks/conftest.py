"""Fixtures for the webhook tests: a real receiver on 127.0.0.1 (tests/webhooks/receivers.py),
allowed through the SSRF rules, and small factories of orgs, crawls and webhooks."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.config import CrawlConfig
from crawls.models import Crawl, Org, Webhook
from tests.webhooks.receivers import SECRET, T0, Receiver, allow


@pytest.fixture
def receiver():
    server = Receiver()
    server.thread.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def allowed(monkeypatch, receiver) -> Receiver:
    """The receiver, allowed through ARCHIVER_WEBHOOK_ALLOW_HOSTS."""
    allow(monkeypatch, receiver.where)
    return receiver


@pytest.fixture
def org(db) -> Org:
    return Org.objects.get_or_create(slug="acme")[0]


@pytest.fixture
def make_crawl(org):
    def make(now: dt.datetime = T0, seeds=("https://example.com/",)) -> Crawl:
        return Crawl.create(org, CrawlConfig(seeds=list(seeds)), now=now)

    return make


@pytest.fixture
def make_hook(db):
    def make(url: str, events=(), org=None, secret: str = SECRET) -> Webhook:
        return Webhook.objects.create(url=url, secret=secret, events=list(events), org=org)

    return make



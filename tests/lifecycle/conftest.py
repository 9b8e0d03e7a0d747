"""Factories for the lifecycle tests: orgs with quotas, crawls put straight into a state."""

from __future__ import annotations

import pytest

from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org
from tests.lifecycle.claiming import NOW


@pytest.fixture
def make_org(db):
    def make(slug="news", **quotas) -> Org:
        return Org.objects.create(slug=slug, **quotas)

    return make


@pytest.fixture
def org(make_org) -> Org:
    return make_org()


@pytest.fixture
def make_crawl(org):
    """A crawl (of `org` unless given) put straight into `status` with `fields`."""

    def make(status=CrawlStatus.QUEUED, *, of=None, created_at=NOW, config=None, **fields) -> Crawl:
        config = CrawlConfig(**{"seeds": ["https://example.com/"], **(config or {})})
        crawl = Crawl.create(of or org, config, now=created_at)
        Crawl.objects.filter(pk=crawl.pk).update(status=status, **fields)
        return Crawl.objects.select_related("org").get(pk=crawl.pk)

    return make



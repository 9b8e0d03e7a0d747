"""Fixtures for search: orgs, crawls and a data dir whose kept WACZs get indexed."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.config import CrawlConfig
from crawls.models import Crawl, Org
from runner import indexing
from tests.search.waczs import keep_pages

NOW = dt.datetime(2026, 12, 2, 6, 0, tzinfo=dt.UTC)


@pytest.fixture
def make_crawl(db):
    def make(org: str = "default") -> Crawl:
        owner, _ = Org.objects.get_or_create(slug=org)
        return Crawl.create(owner, CrawlConfig(seeds=["http://127.0.0.1:9/"]))

    return make


@pytest.fixture
def indexed(conf_data_dir, tmp_path, make_crawl):
    """indexed(pages, org=..., crawl=...) -> the crawl: a WACZ of those pages kept and indexed."""

    def index(pages: list[dict], org: str = "default", crawl: Crawl | None = None) -> Crawl:
        crawl = crawl or make_crawl(org)
        keep_pages(conf_data_dir, crawl, pages, tmp_path / "made")
        while indexing.index_next(conf_data_dir, NOW):
            pass
        return crawl

    return index

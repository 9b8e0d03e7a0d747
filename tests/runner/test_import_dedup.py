"""A recrawl deduplicates against an import (issue 43): a site on 127.0.0.1 archived by
`wget --warc-file`, imported, its payloads indexed; archiver's crawler (a local process, the
runner's private Redis) then crawls the unchanged site with dedup on and stores revisits for
what the import holds, naming the import's archive as one it requires; `archiver diff` finds the page unchanged."""

from __future__ import annotations

import json
import zipfile

import pytest

from crawls import dedup, diffing
from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner import intake
from tests.runner.helpers import is_final
from tests.runner.test_dedup_crawls import records
from tests.sitegen import serve_site
from tests.test_import import wget_warc
from tests.waiting import drive

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_a_recrawl_deduplicates_against_an_imported_warc(make_runner, make_crawl, settings, org,
                                                         tmp_path, monkeypatch):
    with serve_site() as site:
        warc = wget_warc(site.url, tmp_path)
        imported = intake.import_archives(settings, org, [warc], db_now())
        dedup.index_pending(settings)
        (kept,) = imported.files
        assert kept.payloads.filter(url=site.url).exists()
        crawl = make_crawl(site.url, dedup=True)
        drive(make_runner(clock=db_now), is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    (second,) = crawl.files.all()
    revisited = {url for kind, url in records(settings.data_dir / second.path) if kind == "revisit"}
    assert site.url in revisited
    with zipfile.ZipFile(settings.data_dir / second.path) as zf:
        package = json.loads(zf.read("datapackage.json"))
    assert dedup.requirement(kept) in package["relation"]["requires"]
    # archiver diff compares the import with the recrawl as it compares two crawls
    monkeypatch.setattr("archiver.conf.get", lambda: settings)  # where diff reads archives
    result = diffing.compare(imported.crawl, crawl)
    assert site.url in result.unchanged

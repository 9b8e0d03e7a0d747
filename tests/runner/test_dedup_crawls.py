"""A real recrawl of an unchanged site with dedup on: archiver's crawler as a local process
(the runner's private Redis, a site on 127.0.0.1) stores revisits for the payloads the
first crawl kept, its WACZ names the first crawl's archive, and replay lists both."""

from __future__ import annotations

import json
import zipfile

import pytest
from warcio.archiveiterator import ArchiveIterator

from crawls import dedup
from crawls.lease import db_now
from crawls.models import CrawlFile, CrawlStatus, FileDependency
from tests.crawler.wacz_check import wacz_validate
from tests.runner.helpers import is_final
from tests.sitegen import serve_site
from tests.waiting import drive

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def records(path) -> list[tuple[str, str]]:
    found = []
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.endswith(".warc.gz"):
                with zf.open(name) as fh:
                    found += [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"))
                              for r in ArchiveIterator(fh)]
    return found


def test_a_recrawl_of_an_unchanged_site_stores_revisits(make_runner, make_crawl, settings):
    with serve_site() as site:
        first = make_crawl(site.url)
        drive(make_runner(clock=db_now), is_final(first))
        dedup.index_pending(settings)  # the runner's periodic step may have done it already
        assert not CrawlFile.objects.filter(payloads_indexed=False).exists()
        second = make_crawl(site.url, dedup=True)
        drive(make_runner(clock=db_now), is_final(second))

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (CrawlStatus.COMPLETE, CrawlStatus.COMPLETE), second.error
    (first_file,) = first.files.all()
    (second_file,) = second.files.all()
    wacz = settings.data_dir / second_file.path
    assert wacz_validate(wacz).returncode == 0
    kinds = records(wacz)
    revisited = {url for kind, url in kinds if kind == "revisit"}
    assert site.url in revisited and site.url + "a.html" in revisited
    assert not {url for kind, url in kinds if kind == "response"} & revisited
    with zipfile.ZipFile(wacz) as zf:
        package = json.loads(zf.read("datapackage.json"))
    assert package["relation"]["requires"] == [dedup.requirement(first_file)]
    dedup.index_pending(settings)
    assert FileDependency.objects.filter(file=second_file, required=first_file).exists()
    assert [f.pk for f in dedup.with_required([second_file])] == [second_file.pk, first_file.pk]

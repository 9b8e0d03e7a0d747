"""Deduplication with browsertrix-crawler (1.12 and later): the runner writes the org's kept
payloads into the crawl's own Redis in that crawler's index layout (crawls/dedup.py,
hand_to_browsertrix), and what the crawler makes of it comes back as archiver's own
dependency rows. The crawler here is fake_crawler.py, which reads the layout as the real one
does; the layout itself is checked against the real crawler's lookup in test_dedup.py."""

from __future__ import annotations

import gzip
import json
import zipfile

import pytest

from crawls import dedup
from crawls.models import (
    Crawl,
    CrawlFile,
    CrawlStatus,
    FileDependency,
    PayloadDigest,
    dependent_crawls,
)
from tests.runner.helpers import is_final
from tests.sitegen import Response, serve_site
from tests.waiting import drive

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def crawled(runner, make_crawl, *urls: str) -> Crawl:
    crawl = make_crawl(*urls, dedup=True)
    drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    return crawl


def indexed(settings) -> None:
    """Every kept file's payloads indexed (the runner's periodic step may have done it)."""
    dedup.index_pending(settings)
    assert not CrawlFile.objects.filter(payloads_indexed=False).exists()


def records(settings, crawl: Crawl) -> tuple[dict[str, str], list[dict]]:
    """URL -> WARC-Type of every record in the crawl's kept WACZ, and what it requires."""
    (kept,) = crawl.files.all()
    found = {}
    with zipfile.ZipFile(settings.data_dir / kept.path) as wacz:
        for name in wacz.namelist():
            if name.startswith("archive/"):
                for block in gzip.decompress(wacz.read(name)).split(b"WARC/1.1\r\n")[1:]:
                    fields = dict(line.split(": ", 1) for line in
                                  block.split(b"\r\n\r\n", 1)[0].decode().split("\r\n"))
                    found[fields["WARC-Target-URI"]] = fields["WARC-Type"]
        package = json.loads(wacz.read("datapackage.json"))
    return found, package.get("relation", {}).get("requires", [])


def test_a_browsertrix_recrawl_revisits_kept_payloads_and_its_archive_requires_the_first(
        fake_runner, make_crawl, settings, caplog):
    with serve_site() as site:
        same, edited = f"{site.root}/site/a.html", f"{site.root}/site/c.html"
        runner = fake_runner()
        first = crawled(runner, make_crawl, same, edited)
        indexed(settings)
        assert PayloadDigest.objects.filter(crawl_file__crawl=first).count() == 2
        site.routes["/site/c.html"] = Response(body=b"<html><body>edited since</body></html>")
        second = crawled(runner, make_crawl, same, edited)
    assert f"crawl {second.short_id}: deduplicating against 2 payload(s) the org kept" in caplog.text

    kinds, requires = records(settings, second)
    assert kinds == {same: "revisit", edited: "response"}
    (first_file,) = first.files.all()
    assert requires == [{"filename": dedup.requirement(first_file)["filename"],
                         "hash": f"sha256:{first_file.sha256}", "size": first_file.size,
                         "crawlId": first.pk}]
    indexed(settings)
    (second_file,) = second.files.all()
    assert list(FileDependency.objects.values_list("file_id", "required_id")) == [
        (second_file.pk, first_file.pk)]
    assert dependent_crawls(first) == [second.short_id]  # so deleting the first is refused

"""A crawl keeps its crawlers' log lines, bounded to the newest ARCHIVER_CRAWL_LOG_MB, and
a crawler's hostile log entries are cut to size before they are stored."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import call_command

from crawls.config import CrawlConfig
from crawls.crawl_logs import MAX_MESSAGE, keep_lines, oldest_to_drop
from crawls.models import Crawl, CrawlLog, Org, Process
from runner.crawler_log import keep_log
from runner.launchers import hostname

pytestmark = pytest.mark.django_db
NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def crawl() -> Crawl:
    return Crawl.create(Org.objects.create(slug="acme"), CrawlConfig(seeds=["https://example.com/"]))


def entry(n: int, size: int = 100) -> dict:
    return {"logLevel": "info", "context": "crawlStatus", "message": f"{n:06d} " + "x" * size}


def test_every_line_is_kept_while_the_log_fits_its_budget(crawl):
    assert keep_lines(crawl, [entry(n) for n in range(10)], NOW, budget=10**6) == 10
    crawl.refresh_from_db()
    assert crawl.logs.count() == 10
    assert crawl.log_bytes == sum(crawl.logs.values_list("size", flat=True))


def test_the_oldest_lines_go_once_the_budget_is_exceeded(crawl):
    for batch in range(5):
        keep_lines(crawl, [entry(batch * 100 + n, size=1000) for n in range(100)], NOW, budget=50_000)
    crawl.refresh_from_db()
    kept = list(crawl.logs.order_by("id").values_list("message", flat=True))
    assert crawl.log_bytes <= 50_000
    assert 40 <= len(kept) < 50
    assert kept[-1].startswith("000499")  # the newest line stays
    assert [int(m[:6]) for m in kept] == list(range(500 - len(kept), 500))  # a contiguous tail


def test_hostile_entries_are_cut_to_size_and_typed(crawl):
    keep_lines(crawl, [
        {"logLevel": "x" * 100, "context": "c" * 500, "message": "m" * 100_000, "details": {"a": "b" * 10**5}},
        "not a dict", None, ["list"],
        {"logLevel": "ERROR", "message": 123, "details": ["not", "a", "dict"]},
    ], NOW, budget=10**6)
    first, second = crawl.logs.order_by("id")
    assert (first.level, len(first.source), len(first.message), first.details) == ("info", 32, MAX_MESSAGE, {})
    assert (second.level, second.message, second.details) == ("error", "123", {})


def test_choosing_which_oldest_lines_to_drop():
    assert oldest_to_drop([(1, 10), (2, 10), (3, 10)], 15) == (2, 20)
    assert oldest_to_drop([(1, 10), (2, 10)], 100) == (2, 20)


def test_the_logs_command_prints_kept_crawler_lines(crawl):
    keep_lines(crawl, [entry(1, size=3)], NOW)
    out = StringIO()
    call_command("logs", crawl.id, stdout=out)
    assert "crawlStatus: 000001 xxx" in out.getvalue()
    assert CrawlLog.objects.count() == 1


def test_an_instance_name_too_long_for_the_source_column_keeps_its_start_and_its_instance(crawl):
    hostname = f"crawl-{crawl.pk}-12"
    keep_lines(crawl, [{"message": "hello", "context": hostname}], NOW, budget=10**6)
    (line,) = crawl.logs.all()
    assert line.source == f"crawl-{crawl.pk[:22]}…-12" and len(line.source) == 32
    assert hostname.startswith(line.source.partition("…")[0])


def test_a_long_source_that_names_no_instance_is_cut_at_its_end(crawl):
    keep_lines(crawl, [{"message": "hello", "context": "someVeryLongContextNameOfTheCrawler!"}], NOW, budget=10**6)
    assert crawl.logs.get().source == "someVeryLongContextNameOfTheCra…"


def test_the_log_an_instance_leaves_on_exit_names_it_by_the_start_of_its_crawls_id(crawl):
    process = Process.objects.create(crawl=crawl, instance=3, hostname=hostname(crawl.pk, 3), launcher="local")
    keep_log(crawl, process, '{"logLevel": "info", "context": "general", "message": "crawl done"}\n', NOW)
    (line,) = crawl.logs.all()
    assert line.source.startswith(f"crawl-{crawl.short_id}") and line.source.endswith("…-3")

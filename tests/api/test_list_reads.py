"""What the crawl list reads: a fixed number of queries whatever the page's size, each crawl's
files in order and a running crawl's uncounted seconds (in-process, for the query count;
the list through gunicorn is in test_crawls.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from crawls.config import CrawlConfig
from crawls.models import ApiToken, Crawl, CrawlFile, CrawlStatus, Org, Process


def crawls(count: int, status: str) -> list[Crawl]:
    # The migration's row is gone after a transactional test on this worker (flushed).
    org, _ = Org.objects.get_or_create(slug="default", defaults={"name": "Default"})
    made = []
    for _ in range(count):
        crawl = Crawl.create(org, CrawlConfig(seeds=["https://example.com/"]))
        Crawl.objects.filter(pk=crawl.pk).update(status=status, elapsed_seconds=10)
        for name in ("b.wacz", "a.wacz"):
            CrawlFile.objects.create(crawl=crawl, path=f"crawls/{crawl.pk}/{name}", size=1, sha256="ab" * 32)
        made.append(crawl)
    return made


def listed(client, secret: str) -> tuple[dict, int]:
    with CaptureQueriesContext(connection) as queries:
        answer = client.get("/api/v1/crawls", {"limit": 200}, HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 200, answer.content
    # Not the token's rate-limit UPDATEs: one more when a request starts a minute's window.
    return answer.json(), sum('"crawls_apitoken"' not in q["sql"] for q in queries.captured_queries)


@pytest.mark.django_db
def test_a_list_page_reads_as_many_queries_for_40_crawls_as_for_2(django_user_model, admin_settings):
    client = Client()
    root = django_user_model.objects.create_superuser("root", password="x")
    _, secret = ApiToken.issue(root, "t", rate_limit=10**6)
    running = crawls(1, CrawlStatus.RUNNING)[0]
    started = timezone.now() - dt.timedelta(seconds=100)
    Process.objects.create(crawl=running, instance=0, hostname="h-0", launcher="local", status="running",
                           started_at=started, counted_until=started)
    crawls(1, CrawlStatus.COMPLETE)
    small, small_queries = listed(client, secret)
    crawls(38, CrawlStatus.COMPLETE)
    big, big_queries = listed(client, secret)
    assert len(small["items"]) == 2 and len(big["items"]) == 40
    assert big_queries == small_queries
    shown = {item["id"]: item for item in big["items"]}
    assert shown[running.pk]["elapsed_seconds"] >= 110  # 10 counted + 100 not counted yet
    assert all([f["path"].rsplit("/", 1)[1] for f in item["files"]] == ["b.wacz", "a.wacz"]
               for item in big["items"])
    # The get reads the same crawl the same way.
    one = client.get(f"/api/v1/crawls/{running.pk}", HTTP_AUTHORIZATION=f"Bearer {secret}").json()
    assert one["elapsed_seconds"] >= 110 and one["files"] == shown[running.pk]["files"]

"""/metrics (crawls/metrics.py): refused without ARCHIVER_METRICS_TOKEN, and with it every
metric of docs/metrics.md in the Prometheus text format, scraped while a real crawl runs
(archiver's crawler as a local process, the private Redis, a slow site on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, RunnerRecord
from runner.tick_stats import TickStats
from tests.runner.helpers import slow_site
from tests.waiting import drive

pytestmark = pytest.mark.django_db
TOKEN = "a-metrics-token-of-20-chars"
EVERY_METRIC = {
    "archiver_crawls", "archiver_queue_depth", "archiver_queue_oldest_due_age_seconds",
    "archiver_pages_archived", "archiver_pages_failed", "archiver_archived_bytes", "archiver_launches",
    "archiver_launch_exits", "archiver_webhook_deliveries", "archiver_runner_heartbeat_age_seconds",
    "archiver_runner_tick_seconds", "archiver_redis_up", "archiver_redis_used_memory_bytes",
    "archiver_redis_maxmemory_bytes", "archiver_crawl_redis_keys", "archiver_crawl_redis_memory_bytes",
    "archiver_hosts_paused", "archiver_host_pause_longest_seconds",
}


@pytest.fixture
def with_token(settings, redis_server, monkeypatch, tmp_path):
    """The admin's settings: the test's data dir, the private Redis, the token set (and
    Django's static files where whitenoise finds them: `settings` here is archiver's)."""
    admin = settings.model_copy(update={"metrics_token": SecretStr(TOKEN), "redis_url": redis_server.url(0)})
    # The admin's view only: the runner in the same process keeps its own settings.
    monkeypatch.setattr("crawls.metrics.conf", SimpleNamespace(get=lambda: admin))
    (tmp_path / "static").mkdir()
    with override_settings(STATIC_ROOT=tmp_path / "static"):
        yield admin


def scrape(client) -> dict:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {family.name: family for family in text_string_to_metric_families(response.content.decode())}


def value(family, **labels) -> float:
    (sample,) = [s for s in family.samples if s.name == family.name and all(
        s.labels.get(k) == v for k, v in labels.items())] or [None]
    assert sample is not None, (family.name, labels, family.samples)
    return sample.value


def test_metrics_are_404_without_a_token_set_and_403_without_the_right_one(settings, client, monkeypatch,
                                                                            with_token):
    for header in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong-token-wrong-token"},
                   {"HTTP_AUTHORIZATION": TOKEN}, {"HTTP_AUTHORIZATION": f"Basic {TOKEN}"}):
        response = client.get("/metrics", **header)
        assert response.status_code == 403, header
        assert TOKEN not in response.content.decode()
    assert client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 405
    monkeypatch.setattr("crawls.metrics.conf", SimpleNamespace(get=lambda: settings))  # no token: no endpoint
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


def test_a_redis_that_does_not_answer_is_shown_down_and_the_rest_still_served(with_token, client, monkeypatch):
    monkeypatch.setattr("crawls.metrics.redis_endpoint", lambda: None)
    families = scrape(client)
    assert value(families["archiver_redis_up"]) == 0
    assert value(families["archiver_crawls"], state="queued") == 0


def test_tick_durations_are_a_histogram_per_runner(with_token, client):
    stats = TickStats()
    for seconds in (0.003, 0.02, 0.02, 0.7, 12.0):
        stats.tick(seconds)
    RunnerRecord.objects.create(id="r-ticks", hostname="node-a", pid=1, data_dir="/x",
                                tick_stats=stats.exported())
    ticks = scrape(client)["archiver_runner_tick_seconds"]
    buckets = {s.labels["le"]: s.value for s in ticks.samples
               if s.name.endswith("_bucket") and s.labels["runner"] == "r-ticks"}
    assert (buckets["0.005"], buckets["0.025"], buckets["1.0"], buckets["10.0"], buckets["+Inf"]) == (1, 3, 4, 4, 5)
    (total,) = [s.value for s in ticks.samples if s.name.endswith("_sum")]
    assert total == pytest.approx(12.743, abs=0.01)


def test_a_scrape_during_a_crawl_shows_it_running_its_pages_and_every_metric(
        make_runner, make_crawl, store, endpoint, with_token, client):
    pause_key = "host:127.0.0.1:9:pause"
    store.client(0).set(pause_key, int(time.time() * 1000) + 600_000)
    try:
        with slow_site(pages=30, delay=0.3) as site:
            crawl = make_crawl(site.url, depth=3)
            runner = make_runner(clock=db_now)

            def crawling() -> bool:
                row = Crawl.objects.get(pk=crawl.pk)
                return row.status == CrawlStatus.RUNNING and row.pages_done >= 2

            drive(runner, crawling)
            families = scrape(client)
            runner.tick()
    finally:
        store.client(0).delete(pause_key)

    assert set(families) >= EVERY_METRIC, EVERY_METRIC - set(families)
    assert value(families["archiver_crawls"], state="running") == 1
    assert value(families["archiver_pages_archived"]) >= 2
    assert value(families["archiver_launches"], status="running") == 1
    assert value(families["archiver_redis_up"]) == 1
    assert value(families["archiver_crawl_redis_keys"], crawl=crawl.short_id) > 0
    assert value(families["archiver_crawl_redis_memory_bytes"], crawl=crawl.short_id) > 0
    assert value(families["archiver_hosts_paused"]) == 1
    assert 500 < value(families["archiver_host_pause_longest_seconds"]) <= 600
    assert value(families["archiver_runner_heartbeat_age_seconds"], runner=runner.id, stopped="false") >= 0
    assert value(families["archiver_webhook_deliveries"], status="failed") == 0


def test_the_dashboard_and_the_doc_show_every_metric_and_no_other():
    docs = Path(__file__).resolve().parents[2] / "docs"
    dashboard = json.loads((docs / "grafana-archiver.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for expr in exprs
             for name in re.findall(r"\barchiver_[a-z_]+", expr)}
    assert shown == EVERY_METRIC, shown ^ EVERY_METRIC
    documented = set(re.findall(r"`(archiver_[a-z_]+)`", (docs / "metrics.md").read_text()))
    assert documented == EVERY_METRIC, documented ^ EVERY_METRIC


def test_a_short_token_is_refused_at_start_up_without_repeating_it():
    from archiver.conf import from_environ
    from archiver.errors import ConfigError

    with pytest.raises(ConfigError, match="ARCHIVER_METRICS_TOKEN: must be at least 16 characters") as caught:
        from_environ({"ARCHIVER_METRICS_TOKEN": "short-secret"})
    assert "short-secret" not in str(caught.value)

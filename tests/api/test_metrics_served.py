"""/metrics under the admin's real WSGI server (gunicorn, its own data dir): refused without
the bearer token, served with it in a form Prometheus's text parser reads, the token in no
log line. What each metric shows during a crawl: tests/runner/test_metrics.py."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.servers import gunicorn

TOKEN = "served-metrics-token-0123456789"


def test_gunicorn_serves_metrics_only_to_the_token():
    data_dir = Path(tempfile.mkdtemp(prefix="amet-", dir="/tmp"))
    try:
        with gunicorn(data_dir, ARCHIVER_METRICS_TOKEN=TOKEN) as server:
            url = f"{server.url}/metrics"
            assert httpx.get(url, timeout=30).status_code == 403
            assert httpx.get(url, headers={"Authorization": "Bearer not-the-token-at-all"},
                             timeout=30).status_code == 403
            response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            assert response.status_code == 200, response.text[:300]
            families = {f.name: f for f in text_string_to_metric_families(response.text)}
            log = server.log.read_text()
        assert {s.labels["state"] for s in families["archiver_crawls"].samples} >= {"queued", "running"}
        # No runner has started an embedded Redis in this data dir: shown down, the rest served.
        assert [s.value for s in families["archiver_redis_up"].samples] == [0]
        assert "/metrics" in log and TOKEN not in log
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

"""Through the real commands: `webhook add`, `add` a crawl of a local site, `run` with the
local launcher; the receiver hears queued, started and completed, each signed, once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.sitegen import serve_site
from tests.webhooks.receivers import SECRET

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def data_dir():
    path = Path(tempfile.mkdtemp(prefix="awh-", dir="/tmp"))  # short: the wake socket lives here
    yield path
    shutil.rmtree(path, ignore_errors=True)


def archiver(env, *args, timeout=120, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=timeout, input=stdin)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_crawl_run_by_the_runner_is_announced_queued_started_completed(data_dir, receiver, redis_server):
    env = {**os.environ, "ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_LAUNCHER": "local",
           "ARCHIVER_REDIS_URL": redis_server.url(0), "ARCHIVER_WEBHOOK_ALLOW_HOSTS": receiver.where,
           "ARCHIVER_POLL_INTERVAL": "0.2", "DJANGO_SETTINGS_MODULE": "archiver.settings"}
    env.pop("ARCHIVER_DATABASE_URL", None)
    with serve_site() as site:
        archiver(env, "migrate", "-v", "0")
        archiver(env, "webhook", "add", receiver.url(), "--secret-file", "-", stdin=SECRET)
        archiver(env, "add", site.url)
        archiver(env, "run", "--no-live", timeout=240)

    assert receiver.events() == ["crawl.queued", "crawl.started", "crawl.completed"]
    assert all(r.signed for r in receiver.received)
    assert len({r.headers["X-Archiver-Event-Id"] for r in receiver.received}) == 3
    completed = receiver.received[-1].payload["crawl"]
    assert completed["status"] == "complete"
    assert completed["pages_done"] >= 1
    assert completed["files"] and all(f["path"].endswith(".wacz") and f["sha256"] and f["size"]
                                      for f in completed["files"])
    listed = json.loads(archiver(env, "webhook", "deliveries", "--json").stdout)
    assert listed["counts"]["succeeded"] == listed["counts"]["total"] == 3

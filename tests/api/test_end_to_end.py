"""A crawl created through the API, run by a real daemon, downloaded in ranges.

gunicorn and `manage.py run --daemon` (local launcher, embedded Redis) share one data dir,
as scripts/start.sh runs them; the site is served on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.api.servers import gunicorn
from tests.installation import Installation
from tests.runner.helpers import slow_site
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def installation():
    data_dir = Path(tempfile.mkdtemp(prefix="aapie-", dir="/tmp"))  # short: the wake socket's path
    inst = Installation(data_dir)
    try:
        yield inst
    finally:
        inst.clean_up()
        shutil.rmtree(data_dir, ignore_errors=True)


UNDER_WAY = ("queued", "starting", "running", "pending_wait", "generate_wacz", "waiting_capacity")


def poll(http, crawl_id: str, timeout: float = 300) -> dict:
    """The crawl as the API shows it once it has ended, asked every 0.3 s over one connection."""
    def ended() -> dict | None:
        crawl = http.get(f"/api/v1/crawls/{crawl_id}").json()
        return None if crawl["status"] in UNDER_WAY else crawl

    return wait_for(ended, timeout, pause=0.3, what=f"the end of crawl {crawl_id}")


def test_a_crawl_created_through_the_api_completes_and_its_wacz_downloads_by_range(installation):
    env = {name: installation.env[name] for name in ("ARCHIVER_LAUNCHER", "ARCHIVER_POLL_INTERVAL",
                                                     "ARCHIVER_LEASE_SECONDS")}
    with gunicorn(installation.data_dir, **env) as server, slow_site(pages=5, delay=0.01) as site:
        server.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")
        secret = server.manage("token", "create", "--user", "ops", "e2e").stdout.strip()
        installation.start_daemon()
        with server.client(secret) as http:
            created = http.post("/api/v1/crawls", json={"seeds": [site.url], "tags": ["e2e"]},
                                headers={"Idempotency-Key": "e2e-1"})
            assert created.status_code == 201, created.text
            crawl = poll(http, created.json()["id"])
            assert crawl["status"] == "complete", crawl
            assert crawl["pages_done"] == 6 and crawl["pages_failed"] == 0
            (wacz,) = [f for f in crawl["files"] if f["path"].endswith(".wacz")]
            on_disk = (installation.data_dir / wacz["path"]).read_bytes()
            assert len(on_disk) == wacz["size"] > 200

            head = http.get(wacz["download_url"], headers={"Range": "bytes=0-99"})
            assert head.status_code == 206
            assert head.headers["Content-Type"] == "application/wacz"
            assert head.headers["Content-Range"] == f"bytes 0-99/{wacz['size']}"
            assert head.content == on_disk[:100] and head.content.startswith(b"PK\x03\x04")
            tail = http.get(wacz["download_url"], headers={"Range": f"bytes={len(on_disk) - 150}-"})
            assert tail.status_code == 206 and tail.content == on_disk[-150:]
            whole = http.get(wacz["download_url"])
            assert hashlib.sha256(whole.content).hexdigest() == wacz["sha256"]

            again = http.post("/api/v1/crawls", json={"seeds": [site.url], "tags": ["e2e"]},
                              headers={"Idempotency-Key": "e2e-1"})
            assert again.json()["id"] == crawl["id"]
            assert len(http.get("/api/v1/crawls").json()["items"]) == 1

"""A collection of WACZs from two different crawls replayed as one in a real Chromium
through ReplayWeb.page (its replay.json on the replay origin), from the admin's Replay page
and through the collection's public link; each member checked with `wacz validate`.

The WACZs are written by tests/admin/browsing.py (one stored page each), not crawled:
the crawl of tests/sitegen.py sites with archiver's crawler is not part of this test yet.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.admin.browsing import archived_crawl, log_in, wait_for_replayed_text
from tests.crawler.wacz_check import WACZ, wacz_validate

pytestmark = pytest.mark.slow


def test_a_collection_of_two_crawls_replays_pages_of_both(installation, admin_url, replay_url, browser, shots):
    driver = browser
    pages = {"http://localhost:9/first.html": "Page of the first crawl",
             "http://localhost:9/second.html": "Page of the second crawl"}
    crawl_ids = [archived_crawl(installation, [(url, text, None)]) for url, text in pages.items()]
    if Path(WACZ).exists():
        for crawl_id in crawl_ids:
            for wacz in (installation.data_dir / "archives" / crawl_id).glob("*.wacz"):
                assert wacz_validate(wacz).returncode == 0, wacz
    installation.manage("collection", "create", "Both")
    installation.manage("collection", "add", "Both", *crawl_ids)
    collection = json.loads(installation.manage("collection", "show", "Both", "--json"))
    assert collection["crawls"] == sorted(crawl_ids)

    log_in(driver, admin_url, installation)
    for url, text in pages.items():
        driver.get(f"{admin_url}/admin/crawls/collection/{collection['id']}/replay/?url={quote(url)}")
        wait_for_replayed_text(driver, shots, text, f"collection-{url.rsplit('/', 1)[1]}")

    link = installation.manage("collection", "link", "Both").strip().splitlines()[-1]
    assert link.startswith(f"{replay_url}/c/pub_")
    driver.get(f"{link}?url={quote('http://localhost:9/second.html')}")
    wait_for_replayed_text(driver, shots, "Page of the second crawl", "collection-public-link")
    installation.manage("collection", "link", "Both", "--revoke")
    gone = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{link}replay.json"],
                          capture_output=True, text=True, timeout=30)
    assert gone.stdout == "404"

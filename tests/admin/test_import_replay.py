"""Imported archives replay in the admin, in a real Chromium (issue 43): a WARC written by
`wget --warc-file` and a WACZ written by py-wacz (`wacz create`) from a site on 127.0.0.1,
each taken in with `archiver import`, show their pages' words through ReplayWeb.page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.admin.browsing import log_in, wait_for_replayed_text
from tests.sitegen import Response, serve_site
from tests.test_import import wget_warc

WACZ = str(Path(sys.executable).parent / "wacz")  # py-wacz's command
pytestmark = pytest.mark.slow
STORY = "The quince orchard was planted before the war"


def pages() -> dict[str, Response]:
    def html(title: str, body: str) -> bytes:
        return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()

    return {"/made/": Response(body=html("Made", '<h1>Elsewhere</h1><a href="story.html">story</a>')),
            "/made/story.html": Response(body=html("Story", f"<h1>{STORY}</h1>"))}


def test_a_wget_warc_and_a_py_wacz_wacz_replay_once_imported(installation, admin_url, browser,
                                                             shots, tmp_path):
    with serve_site(extra=pages()) as site:
        seed = site.root + "/made/"
        warc = wget_warc(seed, tmp_path)
    wacz = tmp_path / "made.wacz"
    subprocess.run([WACZ, "create", "--detect-pages", "-o", str(wacz), str(warc)],
                   check=True, timeout=60, capture_output=True)
    crawls = [json.loads(installation.manage("import", str(path), "--json"))["id"]
              for path in (warc, wacz)]

    log_in(browser, admin_url, installation)
    for crawl_id, name in zip(crawls, ("import-warc", "import-wacz"), strict=True):
        browser.get(f"{admin_url}/admin/crawls/crawl/{crawl_id}/replay/?url="
                    f"{quote(seed + 'story.html')}")
        wait_for_replayed_text(browser, shots, STORY, name)

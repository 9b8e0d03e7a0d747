"""A crawl added with `archiver add --browser` runs archiver's own crawler with --browser on
the host's real Chromium, and archives the pages only a browser finds (tests/jssite.py).

Skipped until the crawler takes --browser (the crawler side of issue 23), or where there is
no Chromium at /usr/bin/chromium; it then runs in full, unchanged."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from archiver import conf
from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, Snapshot
from runner.launchers import LocalLauncher, crawler_command
from tests.jssite import js_pages, js_site
from tests.runner.helpers import is_final
from tests.sitegen import serve_site
from tests.waiting import drive

CHROMIUM = "/usr/bin/chromium"
PAGES = 7
pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def crawler_takes_browser() -> bool:
    try:
        result = subprocess.run([*crawler_command(), "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--browser" in result.stdout


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")
def test_a_crawl_added_with_browser_archives_the_script_built_pages(make_runner, org, settings,
                                                                    monkeypatch):
    if not crawler_takes_browser():
        pytest.skip("archiver's crawler does not take --browser yet (issue 23, the crawler side)")
    monkeypatch.setenv("ARCHIVER_LAUNCHER", "local")
    monkeypatch.setenv("ARCHIVER_CHROMIUM", CHROMIUM)
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(settings.data_dir))
    conf.get.cache_clear()
    local = settings.model_copy(update={"chromium": CHROMIUM})
    with serve_site(extra=js_site(PAGES)) as site:
        seed = site.root + "/js/"
        out = io.StringIO()
        try:
            call_command("add", seed, "--browser", stdout=out)
        finally:
            conf.get.cache_clear()
        crawl = Crawl.objects.get(pk=out.getvalue().strip())
        runner = make_runner(LocalLauncher(local), settings=local, clock=db_now)
        drive(runner, is_final(crawl), timeout=180)

    crawl.refresh_from_db()
    assert crawl.status == CrawlStatus.COMPLETE, crawl.error
    process = crawl.processes.get()
    assert "--browser" in process.args and process.args[process.args.index("--chromium") + 1] == CHROMIUM
    urls = set(Snapshot.objects.filter(crawl=crawl, status="done").values_list("url", flat=True))
    assert js_pages(site.root, PAGES) <= urls  # every page, though an HTML parser finds no link

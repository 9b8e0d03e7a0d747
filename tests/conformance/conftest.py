"""The conformance fake (fake_crawler.py) run by the real local launcher and runner, against
the private Redis: the runner fixtures of tests/runner, and a runner whose crawler is the fake."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from crawls.lease import db_now
from runner.launchers import LocalLauncher
from tests.runner.conftest import data_dir, endpoint, make_crawl, make_runner, org, settings, store

FAKE = Path(__file__).with_name("fake_crawler.py")

__all__ = ["data_dir", "endpoint", "make_crawl", "make_runner", "org", "settings", "store"]


@pytest.fixture
def fake_runner(make_runner, settings):
    """make(**script): a runner on the real clock whose crawlers are fake_crawler.py (taken for
    browsertrix-crawler, as ARCHIVER_CRAWLER_KIND=browsertrix says), scripted
    by <data_dir>/conformance.json."""

    def make(**script):
        (settings.data_dir / "conformance.json").write_text(json.dumps(script))
        fake_settings = settings.model_copy(update={"local_crawler_command": (sys.executable, str(FAKE)),
                                                    "crawler_kind": "browsertrix"})
        return make_runner(LocalLauncher(fake_settings), settings=fake_settings, clock=db_now)

    return make

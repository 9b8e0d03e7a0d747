"""What the daemon shows: log lines off a terminal, a table on one."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console

from crawls.models import CrawlStatus
from runner.live import LiveView, LogView

pytestmark = pytest.mark.django_db


class Seen:
    def __init__(self, crawls):
        self.seen = {c.pk: c for c in crawls}
        self.events = ["crawl 1a2b3c4d: launched instance 0 (local)"]
        self.id = "runner-1"


def running(make_crawl):
    crawl = make_crawl()
    crawl.status, crawl.pages_done, crawl.pages_found, crawl.size_bytes = CrawlStatus.RUNNING, 12, 40, 1_200_000
    return crawl


def test_off_a_terminal_each_change_is_one_plain_line(make_crawl, caplog):
    crawl = running(make_crawl)
    view = LogView()
    with caplog.at_level(logging.INFO, logger="runner"):
        view.update(Seen([crawl]))
        view.update(Seen([crawl]))  # unchanged: not repeated at once
    assert caplog.messages == [f"[runner] crawl {crawl.short_id} running pages=12/40 size=1.2 MB"]


def test_on_a_terminal_a_table_shows_state_pages_and_events(make_crawl):
    crawl = running(make_crawl)
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=140))
    view.update(Seen([crawl]))
    view.close()
    text = out.getvalue()
    assert crawl.short_id in text and "12/40" in text and "1.2 MB" in text
    assert "launched instance 0" in text

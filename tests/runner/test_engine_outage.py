"""The launcher's engine away for many ticks: said once by the daemon and once by each crawl
(docs/runner.md "Docker engine outages"); the chaos trial against a real dockerd is
tests/chaos/test_engine_restart.py."""

from __future__ import annotations

import logging

from crawls.models import CrawlLog
from tests.runner.step_helpers import T0, later


def test_an_engine_away_for_ticks_is_said_once_by_the_daemon_and_once_by_each_crawl(
        make_runner, make_crawl, fake, caplog):
    crawls = [make_crawl(), make_crawl()]
    runner = make_runner(fake)
    runner.tick(T0)
    with caplog.at_level(logging.INFO):
        fake.unavailable = True
        for second in range(1, 11):
            runner.tick(later(second))
        fake.unavailable = False
        runner.tick(later(11))
        runner.tick(later(12))
    said = [r.getMessage() for r in caplog.records if "crawler launcher" in r.getMessage()
            or "engine" in r.getMessage()]
    assert said[0].startswith("runner: the crawler launcher is unavailable (EngineUnavailable: "
                              "fake engine unreachable)")
    assert said[1].startswith("runner: the crawler launcher is back after ")
    assert len(said) == 2, said  # nothing per crawl or per tick in the daemon's log
    for crawl in crawls:
        own = list(CrawlLog.objects.filter(crawl=crawl, message__contains="Docker engine").order_by("pk")
                   .values_list("message", flat=True))
        assert own == ["the Docker engine does not answer; waiting for it",
                       "the Docker engine answers again"]

"""A WACZ's page lists are read under limits on what they cost (bytes, lines, entries, time)
and end when the runner stops: a 1 MB archive holding a GiB of newlines is refused within
seconds, said in the crawl's log, and names no page (runner/archive.py page_entries)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from crawls.models import CrawlFile, Snapshot
from runner import archive
from tests.bombs import newline_wacz
from tests.runner.step_helpers import end_instance, later, report

pytestmark = pytest.mark.django_db


def kept_bomb(data_dir, crawl) -> CrawlFile:
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    (folder / "bomb.wacz").write_bytes(newline_wacz())
    return CrawlFile(crawl=crawl, path=f"archives/{crawl.pk}/bomb.wacz", size=0, sha256="")


def test_a_gigabyte_of_newlines_in_a_pages_list_is_refused_within_seconds(make_crawl, data_dir):
    kept = kept_bomb(data_dir, make_crawl())
    started = time.monotonic()
    entries = archive.kept_pages(data_dir, kept)
    assert next(entries)["format"] == "json-pages-1.0"
    assert next(entries)["url"] == "http://site.test/0"
    with pytest.raises(archive.Refused, match="over 2000000 lines"):
        next(entries)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(("limits", "refusal"), [
    (archive.Limits(pages_bytes=1 << 20), "over 1048576 bytes"),
    (archive.Limits(pages_entries=0), "over 0 entries"),
    (archive.Limits(pages_seconds=0), "took over 0s"),
    (archive.Limits(stop=threading.Event()), "the runner is stopping"),
])
def test_each_cost_of_a_pages_list_is_bounded(make_crawl, data_dir, limits, refusal):
    if limits.stop is not None:
        limits.stop.set()
    kept = kept_bomb(data_dir, make_crawl())
    with pytest.raises(archive.Refused, match=refusal):
        list(archive.kept_pages(data_dir, kept, limits))


def test_sigterm_ends_a_long_read_of_a_pages_list_at_once(make_runner, make_crawl, fake, data_dir):
    runner = make_runner(fake)
    kept = kept_bomb(data_dir, make_crawl())
    unbounded = archive.Limits(pages_bytes=1 << 40, pages_lines=1 << 40, pages_seconds=600,
                               stop=runner.rt.stop_event)  # only the stop can end it early
    with runner.signals():
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(archive.Refused, match="the runner is stopping"):
            list(archive.kept_pages(data_dir, kept, unbounded))
    assert time.monotonic() - started < 1.5  # the whole GiB takes several seconds


def test_a_collected_wacz_whose_pages_list_is_a_bomb_names_nothing_and_says_so_quickly(
        make_runner, make_crawl, fake):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(later(0))
    report(runner.rt.store, crawl, done=1, found=1, pages=["http://site.test/0"])
    end_instance(fake, runner.rt.store, crawl, 0, "done", wacz=newline_wacz())

    started = time.monotonic()
    runner.tick(later(1))
    assert time.monotonic() - started < 3

    crawl.refresh_from_db()
    assert crawl.files.count() == 1  # kept, never deleted
    assert Snapshot.objects.get(crawl=crawl, url="http://site.test/0").filename == ""
    warning = crawl.logs.get(level="warning", message__startswith="cannot read the pages list")
    assert "over 2000000 lines" in warning.message and "no page is named after it" in warning.message

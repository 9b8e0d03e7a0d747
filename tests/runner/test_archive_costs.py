"""A WACZ's page lists are read under limits on what they cost (bytes, lines, entries, time)
and end when the runner stops: a 1 MB archive holding a GiB of newlines is refused after
reading a few MB of it, said in the crawl's log, and names no page (runner/archive.py
page_entries). What a read cost is counted in decompressed bytes (PagesCost), not seconds."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from crawls.models import CrawlFile, Snapshot
from runner import archive, wacz_members
from tests.bombs import at_most_the_line_limit, counted_page_list_reads, newline_wacz
from tests.runner.step_helpers import end_instance, later, report

pytestmark = pytest.mark.django_db


@pytest.fixture
def costs(monkeypatch) -> list[wacz_members.PagesCost]:
    return counted_page_list_reads(monkeypatch)


def kept_bomb(data_dir, crawl) -> CrawlFile:
    folder = data_dir / "archives" / crawl.pk
    folder.mkdir(parents=True)
    (folder / "bomb.wacz").write_bytes(newline_wacz())
    return CrawlFile(crawl=crawl, path=f"archives/{crawl.pk}/bomb.wacz", size=0, sha256="")


def test_a_gigabyte_of_newlines_in_a_pages_list_is_refused_after_a_few_megabytes(
        make_crawl, data_dir, costs):
    kept = kept_bomb(data_dir, make_crawl())
    entries = archive.kept_pages(data_dir, kept)
    assert next(entries)["format"] == "json-pages-1.0"
    assert next(entries)["url"] == "http://site.test/0"
    with pytest.raises(archive.Refused, match="over 2000000 lines"):
        next(entries)
    assert len(costs) == 1 and at_most_the_line_limit(costs)  # 3 MB of the GiB


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


def test_sigterm_ends_a_long_read_of_a_pages_list_at_once(make_runner, make_crawl, fake, data_dir,
                                                          monkeypatch):
    runner = make_runner(fake)
    kept = kept_bomb(data_dir, make_crawl())
    unbounded = archive.Limits(pages_bytes=1 << 40, pages_lines=1 << 40, pages_seconds=600,
                               stop=runner.rt.stop_event)  # only the stop can end it early
    signalled = []

    class SignalledMidway(wacz_members.PagesCost):
        """Sends the SIGTERM once 8 MiB of the GiB are read; counts what is read after it."""

        def read(self, data: bytes, lines: int) -> None:
            if signalled:
                signalled.append(len(data))
            elif self.bytes >= 8 << 20:
                signalled.append(0)
                os.kill(os.getpid(), signal.SIGTERM)  # its handler runs before the next line
            super().read(data, lines)

    monkeypatch.setattr(wacz_members, "PagesCost", SignalledMidway)
    with runner.signals(), pytest.raises(archive.Refused, match="the runner is stopping"):
        list(archive.kept_pages(data_dir, kept, unbounded))
    assert signalled and sum(signalled) <= archive.CHUNK  # the chunk in hand, if any, then no more


def test_a_collected_wacz_whose_pages_list_is_a_bomb_names_nothing_and_says_so_quickly(
        make_runner, make_crawl, fake, costs):
    crawl = make_crawl()
    runner = make_runner(fake)
    runner.tick(later(0))
    report(runner.rt.store, crawl, done=1, found=1, pages=["http://site.test/0"])
    end_instance(fake, runner.rt.store, crawl, 0, "done", wacz=newline_wacz())

    runner.tick(later(1))
    assert at_most_the_line_limit(costs)  # never the whole GiB

    crawl.refresh_from_db()
    assert crawl.files.count() == 1  # kept, never deleted
    assert Snapshot.objects.get(crawl=crawl, url="http://site.test/0").filename == ""
    warning = crawl.logs.get(level="warning", message__startswith="cannot read the pages list")
    assert "over 2000000 lines" in warning.message and "no page is named after it" in warning.message

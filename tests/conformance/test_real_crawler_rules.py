"""Real crawls through the runner and the local launcher, with the real Redis and a site on
127.0.0.1, of a crawler that behaves as browsertrix-crawler does (fake_crawler.py): each rule
of docs/crawlers.md, "Protocol differences archiver handles"."""

from __future__ import annotations

import io
import os
import signal
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from crawls.models import Crawl, CrawlStatus, ExitReason, Snapshot, SnapshotStatus
from tests.runner.helpers import is_final, wacz_pages
from tests.sitegen import serve_site
from tests.waiting import drive, wait_for_pages

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def pages_of(site, *names: str) -> list[str]:
    return [f"{site.root}/site/{name}" for name in names]


def kept_wacz(crawl: Crawl, settings):
    (kept,) = crawl.files.all()
    return kept.path.rsplit("/", 1)[1], settings.data_dir / kept.path


def test_an_unreachable_seed_fails_the_crawl_and_its_seed_page_which_can_be_retried(fake_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(site.external_url)
        drive(fake_runner(), is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    assert crawl.error.startswith("Page Load Failed")  # the crawler's own words, first
    assert crawl.error.endswith("(no page archived, exit 9)")
    (process,) = crawl.processes.all()
    assert (process.exit_code, process.exit_reason) == (9, ExitReason.NO_PAGE)  # not relaunched
    seed = Snapshot.objects.get(crawl=crawl)
    assert (seed.url, seed.status, seed.http_status, seed.load_state) == (
        site.external_url, SnapshotStatus.FAILED, None, 0)
    assert seed.filename == ""
    out = io.StringIO()
    call_command("retry", crawl.pk, "--failed-pages", stdout=out)
    assert "for its 1 failed page(s)" in out.getvalue()


def test_a_page_that_failed_among_good_ones_is_failed_and_the_others_name_the_kept_wacz(
        fake_runner, make_crawl, settings):
    with serve_site() as site:
        good = pages_of(site, "a.html", "c.html")
        crawl = make_crawl(*good, site.external_url)
        drive(fake_runner(), is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert (crawl.pages_done, crawl.pages_failed) == (2, 1)
    name, path = kept_wacz(crawl, settings)
    snapshots = {s.url: s for s in Snapshot.objects.filter(crawl=crawl)}
    assert {url: (s.status, s.http_status, s.load_state, s.filename) for url, s in snapshots.items()} == {
        good[0]: (SnapshotStatus.DONE, 200, 4, name),
        good[1]: (SnapshotStatus.DONE, 200, 4, name),
        site.external_url: (SnapshotStatus.FAILED, None, 0, ""),
    }
    assert sorted(wacz_pages(path)) == sorted(good)
    assert [s.url for s in crawl.failed_pages()] == [site.external_url]
    call_command("retry", crawl.pk, "--failed-pages", stdout=io.StringIO())
    assert Crawl.objects.get(pk=crawl.pk).config_override["seeds"] == [site.external_url]


def test_a_fatal_error_reported_as_exit_0_fails_the_crawl_in_the_crawlers_words(fake_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(site.url)
        drive(fake_runner(fatal="Seed list is not valid"), is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    assert crawl.error == "Seed list is not valid. Quitting (the crawler failed, exit 0)"
    assert crawl.error_detail.endswith("ended with status failed (exit 0): Seed list is not valid. Quitting")
    (process,) = crawl.processes.all()  # permanent: never relaunched
    assert (process.exit_code, process.exit_reason) == (0, ExitReason.PERMANENT)


def test_sigterm_ends_a_session_with_exit_11_and_no_wacz_and_the_next_wacz_holds_its_warcs(
        fake_runner, make_crawl, settings):
    with serve_site() as site:
        urls = pages_of(site, "a.html", "c.html", "target.html", "a1.html", "b1.html", "a2.html")
        crawl = make_crawl(*urls)
        runner = fake_runner(delay=0.4)
        wait_for_pages(runner, crawl, 2)
        first = crawl.processes.get()
        os.killpg(first.pid, signal.SIGTERM)  # what `docker stop` sends
        drive(runner, lambda: crawl.processes.count() == 2)
        assert crawl.files.count() == 0  # the interrupted session left no WACZ
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    runs = list(crawl.processes.order_by("created_at", "pk").values_list("exit_code", "exit_reason"))
    assert runs == [(11, ExitReason.INTERRUPTED), (0, ExitReason.DONE)]
    name, path = kept_wacz(crawl, settings)
    with zipfile.ZipFile(path) as wacz:
        warcs = [n for n in wacz.namelist() if n.startswith("archive/")]
    assert len(warcs) == 2  # the interrupted session's WARC and the second one's
    assert sorted(wacz_pages(path)) == sorted(urls)
    assert set(Snapshot.objects.filter(crawl=crawl).values_list("status", "filename")) == {
        (SnapshotStatus.DONE, name)}


def test_a_kill_without_the_oom_flag_is_a_crash_relaunched_not_oom(fake_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(*pages_of(site, "a.html", "c.html", "target.html", "a1.html", "b1.html"))
        runner = fake_runner(delay=0.4)
        wait_for_pages(runner, crawl, 1)
        wrapper = crawl.processes.get().pid
        (child,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
        os.kill(int(child), signal.SIGKILL)  # what `docker kill` does: 137, OOMKilled false
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    runs = list(crawl.processes.order_by("created_at", "pk").values_list("exit_code", "exit_reason"))
    assert runs == [(137, ExitReason.CRASH), (0, ExitReason.DONE)]


def test_a_single_instance_shutting_down_never_shows_pending_wait(fake_runner, make_crawl):
    seen = []

    def final() -> bool:
        crawl.refresh_from_db()
        seen.append(crawl.status)
        return crawl.is_final

    with serve_site() as site:
        crawl = make_crawl(*pages_of(site, "a.html", "c.html"))
        drive(fake_runner(pending_wait=1.5), final)

    assert crawl.status == S.COMPLETE, crawl.error
    assert S.RUNNING in seen and S.PENDING_WAIT not in seen


def test_a_canceled_crawl_keeps_no_files_and_no_size(fake_runner, make_crawl, settings):
    with serve_site() as site:
        crawl = make_crawl(*pages_of(site, "a.html", "c.html", "target.html", "a1.html", "b1.html"))
        runner = fake_runner(delay=0.4)
        drive(runner, lambda: Crawl.objects.get(pk=crawl.pk).size_bytes > 0)
        call_command("cancel", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    assert (crawl.size_bytes, crawl.files.count()) == (0, 0)
    assert not list((settings.data_dir / "archives").rglob("*.wacz"))

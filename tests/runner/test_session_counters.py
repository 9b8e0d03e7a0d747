"""Per-session counters (Process.pages_done, size_bytes) for every way a real session ends:
archiver's crawler as local processes, the private Redis, a site on 127.0.0.1."""

from __future__ import annotations

import io
import os
import signal

import pytest
from django.core.management import call_command

from crawls.config import human_size
from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, ExitReason
from runner.launchers import LocalLauncher, crawler_command
from tests.runner.helpers import is_final, script, slow_site, status_of
from tests.sitegen import serve_site
from tests.waiting import drive, wait_for_pages

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def sessions(crawl) -> list[tuple[int, int]]:
    return list(crawl.processes.order_by("created_at").values_list("pages_done", "size_bytes"))


def named_for(crawl, process) -> int:
    """Done pages whose Snapshot names the archive kept for `process`."""
    return crawl.snapshots.filter(status="done", filename__endswith=f"-{process.instance}-{process.pk}.wacz").count()


def status_rows(crawl) -> list[list[str]]:
    """The rows of `archiver status ID`'s processes table, split into columns."""
    out = io.StringIO()
    call_command("status", crawl.pk, stdout=out)
    table = out.getvalue().split("\nprocesses\n")[1].split("\n\n")[0].splitlines()
    return [line.split() for line in table[1:]]



def test_a_session_that_completes_the_crawl_counts_its_pages_and_bytes(make_runner, make_crawl):
    with serve_site() as site:
        crawl = make_crawl(site.url)
        drive(make_runner(clock=db_now), is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    (process,) = crawl.processes.all()
    assert process.exit_reason == ExitReason.DONE
    assert sessions(crawl) == [(crawl.pages_done, crawl.files.get().size)]
    assert process.pages_done == named_for(crawl, process) >= 10


def test_a_paused_session_counts_what_it_archived_and_the_resumed_one_the_rest(
        make_runner, make_crawl):
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 3)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        crawl.refresh_from_db()
        (paused,) = crawl.processes.all()
        assert paused.pages_done == crawl.pages_done >= 3
        assert paused.size_bytes == crawl.files.get().size > 0
        # HOST LAUNCHER STATUS EXIT PAGES SIZE ...: the exit is "0 done", the size "14.0 KB"
        assert [row[5:8] for row in status_rows(crawl)] == [
            [str(paused.pages_done), *human_size(paused.size_bytes).split()]]

        call_command("resume", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    first, second = crawl.processes.order_by("created_at")
    assert [first.pages_done, second.pages_done] == [named_for(crawl, first), named_for(crawl, second)]
    assert first.pages_done + second.pages_done == crawl.pages_done == 21
    sizes = list(crawl.files.order_by("created_at").values_list("size", flat=True))
    assert [first.size_bytes, second.size_bytes] == sizes


def test_a_canceled_session_counts_the_pages_it_did_and_keeps_no_bytes(make_runner, make_crawl):
    with slow_site() as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 2)
        call_command("cancel", crawl.pk, stdout=io.StringIO())
        runner.cancel_grace = 5
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED and crawl.files.count() == 0
    assert sessions(crawl) == [(crawl.pages_done, 0)] and crawl.pages_done >= 2


def test_a_session_canceled_after_a_pause_counts_only_its_own_pages(make_runner, make_crawl):
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 3)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        paused_at = Crawl.objects.get(pk=crawl.pk).pages_done
        call_command("resume", crawl.pk, stdout=io.StringIO())
        wait_for_pages(runner, crawl, paused_at + 2)
        call_command("cancel", crawl.pk, stdout=io.StringIO())
        runner.cancel_grace = 5
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    (first, first_size), (second, second_size) = sessions(crawl)
    assert first == paused_at and first_size > 0  # what it archived then, deleted since
    assert second == crawl.pages_done - paused_at >= 2 and second_size == 0


def test_a_crashed_session_counts_the_pages_it_did_and_its_relaunch_what_it_archived(
        make_runner, make_crawl, settings, tmp_path):
    counter, pid_file = tmp_path / "launches", tmp_path / "crawler.pid"
    command = script(tmp_path / "crashing-crawler", f"""
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}
if [ "$n" -gt 0 ]; then exec {" ".join(crawler_command())} "$@"; fi
{" ".join(crawler_command())} "$@" &
echo $! > {pid_file}
wait $!
exit 1
""")
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(LocalLauncher(settings, command=command), clock=db_now)
        wait_for_pages(runner, crawl, 3)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        drive(runner, lambda: not crawl.processes.order_by("created_at").first().is_live)
        done_then = Crawl.objects.get(pk=crawl.pk).pages_done
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    crashed, relaunched = crawl.processes.order_by("created_at")
    assert crashed.exit_reason == ExitReason.CRASH
    assert (crashed.pages_done, crashed.size_bytes) == (done_then, 0) and done_then >= 3
    # The relaunch packs what the crashed session left in the folder too (docs/runner.md).
    assert relaunched.pages_done == named_for(crawl, relaunched) == crawl.pages_done
    assert relaunched.size_bytes == crawl.files.get().size

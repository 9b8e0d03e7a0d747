"""Real crawls: archiver's crawler as local processes, the private Redis, a site on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import time
import zipfile

import pytest
from archiver_crawler.config import available_cpus
from django.core.management import call_command

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, ExitReason, ProcessStatus, Snapshot
from runner.launchers import LocalLauncher, crawler_command
from runner.redis_server import RedisEndpoint, answers
from tests.ports import free_port
from tests.runner.helpers import (
    assert_disjoint_archives,
    is_final,
    processes_mentioning,
    script,
    sha256,
    slow_site,
    status_of,
)
from tests.sitegen import serve_site
from tests.test_wacz_signing import spec_check
from tests.waiting import HANG, drive, wait_for, wait_for_pages

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_a_crawl_runs_to_complete_with_pages_and_a_verified_wacz(make_runner, make_crawl, settings, store):
    with serve_site() as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    urls = set(Snapshot.objects.filter(crawl=crawl, status="done").values_list("url", flat=True))
    assert site.url in urls and len(urls) == crawl.pages_done >= 10
    (record,) = crawl.files.all()
    path = settings.data_dir / record.path
    assert record.size == path.stat().st_size and record.sha256 == sha256(path)
    kept = path.stat()  # the runner's own, 0600, whatever the crawler's umask made it
    assert (kept.st_uid, kept.st_gid, stat.S_IMODE(kept.st_mode)) == (os.geteuid(), os.getegid(), 0o600)
    assert crawl.size_bytes == record.size
    # Signed by the crawler with archiver's key, and verified as it was kept (issue 43).
    spec_check(path)
    assert record.signer.startswith("this archiver (key ") and record.verify_ok is True
    assert record.verified_at is not None and record.verify_result == "verified"
    assert crawl.exec_seconds > 0 and crawl.redis_db is None
    assert store.client(1).dbsize() == 0
    (process,) = crawl.processes.all()
    assert (process.exit_code, process.exit_reason) == (0, ExitReason.DONE)
    assert processes_mentioning(str(settings.data_dir)) == []


def test_a_crashing_crawler_is_relaunched_with_backoff_and_the_crawl_completes(
        make_runner, make_crawl, settings, tmp_path):
    counter = tmp_path / "launches"
    command = script(tmp_path / "flaky-crawler", f"""
n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}
if [ "$n" -lt 2 ]; then echo "simulated crash $n" >&2; exit 1; fi
exec {" ".join(crawler_command())} "$@"
""")
    with serve_site() as site:
        crawl = make_crawl(site.url, depth=1)
        runner = make_runner(LocalLauncher(settings, command=command), clock=db_now)
        started = time.monotonic()
        drive(runner, is_final(crawl))

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert time.monotonic() - started >= 3  # backoff: 1 s, then 2 s
    runs = list(crawl.processes.order_by("created_at").values_list("exit_code", "exit_reason"))
    assert runs == [(1, ExitReason.CRASH), (1, ExitReason.CRASH), (0, ExitReason.DONE)]
    assert "simulated crash 0" in crawl.processes.order_by("created_at").first().log_tail
    assert crawl.files.count() == 1


def test_a_crawler_refusing_its_config_fails_the_crawl_at_once_visibly_in_status(
        make_runner, make_crawl, settings, tmp_path):
    command = script(tmp_path / "picky-crawler", 'echo "unknown option --frobnicate" >&2; exit 4\n')
    crawl = make_crawl("http://127.0.0.1:9/")
    runner = make_runner(LocalLauncher(settings, command=command), clock=db_now)
    drive(runner, is_final(crawl), timeout=20)

    out = io.StringIO()
    call_command("status", crawl.pk, "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["status"] == "failed"
    assert summary["error"].startswith("unknown option --frobnicate (configuration refused, exit 4)")
    assert crawl.processes.count() == 1



@pytest.mark.skipif(available_cpus() < 2, reason="one CPU: the crawler runs one process")
def test_an_instance_in_two_processes_is_one_instance_to_the_runner(make_runner, make_crawl,
                                                                     settings):
    with slow_site(pages=20, delay=0.3) as site:
        crawl = make_crawl(site.url, workers=2)  # the crawler's default: 2 processes here
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 3)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        call_command("resume", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))
        fetched_twice = [p for p, n in site.requests.items() if p.startswith("/gen/p") and n > 1]
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.pages_done == 21 and fetched_twice == []
    assert [p.exit_code for p in crawl.processes.all()] == [0, 0]  # one instance, two sessions
    wacz = [settings.data_dir / f.path for f in crawl.files.all()]
    assert len(wacz) == 2
    with zipfile.ZipFile(wacz[-1]) as zf:
        # The second session's WARCs (the first's went with its WACZ): one per process.
        assert len([n for n in zf.namelist() if n.startswith("archive/")]) == 2
    assert_disjoint_archives(wacz, {site.url})


def test_stop_from_the_cli_ends_stopped_by_user_with_an_archive(make_runner, make_crawl):
    with slow_site() as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 3)
        call_command("stop", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.STOPPED_BY_USER and crawl.stop_reason == "user"
    assert 3 <= crawl.pages_done < 31 and crawl.files.count() == 1


def test_cancel_from_the_cli_ends_canceled_without_files(make_runner, make_crawl, settings):
    with slow_site() as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 2)
        call_command("cancel", crawl.pk, stdout=io.StringIO())
        runner.cancel_grace = 5  # the crawler may hang after a cancel: we do not wait for long
        drive(runner, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.CANCELED
    assert crawl.files.count() == 0 and not list(settings.data_dir.rglob("*.wacz"))


def test_pause_then_resume_from_the_cli_continues_where_it_stopped(make_runner, make_crawl, store, settings):
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 3)
        call_command("pause", crawl.pk, stdout=io.StringIO())
        drive(runner, lambda: status_of(crawl) == S.PAUSED)
        crawl.refresh_from_db()
        paused_at_pages = crawl.pages_done
        assert crawl.redis_db is not None and crawl.files.count() == 1
        assert store.client(crawl.redis_db).get(f"{crawl.pk}:d") == str(paused_at_pages)

        call_command("resume", crawl.pk, stdout=io.StringIO())
        drive(runner, is_final(crawl))
        fetched_twice = [p for p, n in site.requests.items() if p.startswith("/gen/p") and n > 1]
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.pages_done == 21 and crawl.files.count() == 2
    assert fetched_twice == []  # pages in flight at the pause were finished, not fetched again
    assert_disjoint_archives([settings.data_dir / f.path for f in crawl.files.all()], {site.url})
    assert crawl.size_bytes == sum(crawl.files.values_list("size", flat=True))


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server with an append-only file that this test may stop and start again."""
    port, folder = free_port(), tmp_path / "redis"
    folder.mkdir()
    procs = []

    def start():
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--appendonly", "yes",
             "--appendfsync", "always", "--save", "", "--databases", "32", "--dir", str(folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        wait_for(lambda: answers(RedisEndpoint(host="127.0.0.1", port=port), timeout=1),
                 what="redis-server answering")
        return proc

    start()
    try:
        yield port, start, procs
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_runner_survives_a_redis_restart_mid_crawl_and_the_crawl_ends_clearly(
        make_runner, make_crawl, settings, own_redis):
    port, start_redis, procs = own_redis
    settings = settings.model_copy(update={"max_launch_attempts": 6})
    runner = make_runner(settings=settings, clock=db_now)
    runner.store.endpoint = RedisEndpoint(host="127.0.0.1", port=port, databases=32)
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        wait_for_pages(runner, crawl, 2)
        procs[-1].terminate()
        procs[-1].wait(timeout=10)
        drive(runner, lambda: Crawl.objects.get(pk=crawl.pk).waiting_reason == "waiting: Redis unreachable",
              timeout=10)
        for _ in range(10):
            runner.tick()
            time.sleep(0.1)
        start_redis()
        drive(runner, is_final(crawl), timeout=90)
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE or (crawl.status == S.FAILED and crawl.error), crawl.status
    if crawl.status == S.COMPLETE:
        assert crawl.pages_done == 21
    assert crawl.waiting_reason == ""


def test_a_process_left_running_by_a_dead_runner_is_adopted_not_duplicated(make_runner, make_crawl, settings):
    with slow_site(pages=15, delay=0.15) as site:
        crawl = make_crawl(site.url)
        first = make_runner(clock=db_now)
        wait_for_pages(first, crawl, 2)
        pid = crawl.processes.get().pid
        # The first runner vanishes without a word (its leases are still live).
        second = make_runner(LocalLauncher(settings), clock=db_now)
        drive(second, is_final(crawl))
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE
    (process,) = crawl.processes.all()
    assert process.pid == pid and process.status == ProcessStatus.EXITED
    assert crawl.files.count() == 1
    assert os.path.exists(settings.data_dir / crawl.files.get().path)


def test_interrupt_crawls_mode_pauses_running_crawls_before_the_loop_exits(make_runner, make_crawl):
    with slow_site(pages=20, delay=0.15) as site:
        crawl = make_crawl(site.url)
        runner = make_runner(clock=db_now)
        wait_for_pages(runner, crawl, 2)
        runner.interrupt_crawls = True
        runner.stop_event.set()  # what the first SIGTERM does
        started = time.monotonic()
        runner.loop("daemon")
    crawl.refresh_from_db()
    assert crawl.status == S.PAUSED and crawl.files.count() == 1
    assert runner.held == {} and time.monotonic() - started < HANG


class Killed(BaseException):
    """What kill -9 is to the runner: nothing after it runs."""


def test_a_runner_killed_between_spawn_and_record_leaves_one_crawler_which_the_next_one_adopts(
        make_runner, make_crawl, settings):
    def die(pid):
        raise Killed(pid)

    with slow_site(pages=15, delay=0.15) as site:
        crawl = make_crawl(site.url)
        first = make_runner(LocalLauncher(settings, after_spawn=die), clock=db_now)
        with pytest.raises(Killed) as killed:
            drive(first, lambda: False, timeout=20)
        pid = killed.value.args[0]
        (row,) = crawl.processes.all()
        assert row.pid is None and row.status == ProcessStatus.STARTING  # never recorded

        second = make_runner(LocalLauncher(settings), clock=db_now)
        drive(second, is_final(crawl))
        fetched_twice = [p for p, n in site.requests.items() if p.startswith("/gen/p") and n > 1]
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    (process,) = crawl.processes.all()
    assert process.pid == pid and process.status == ProcessStatus.EXITED
    assert fetched_twice == [] and crawl.files.count() == 1

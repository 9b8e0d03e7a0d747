"""`manage.py run --daemon` as a real process: out of the box (embedded Redis), kill -9, restart.

Each test has a data dir of its own (its own SQLite database and embedded Redis), so the
daemon and the commands here share nothing with the rest of the suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.installation import ROOT, Installation
from tests.runner.helpers import (
    assert_disjoint_archives,
    processes_mentioning,
    sha256,
    slow_site,
)
from tests.waiting import HANG, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def installation(data_dir):
    inst = Installation(data_dir)
    inst.migrate()
    try:
        yield inst
    finally:
        inst.clean_up()


def test_the_daemon_runs_a_crawl_out_of_the_box_and_a_second_one_is_refused(installation):
    with slow_site(pages=5, delay=0.05) as site:
        daemon = installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        # A crawl that never starts fails here; how fast it starts is no test's to judge.
        installation.wait(crawl_id, lambda c: c["status"] == "running", timeout=HANG)

        second = subprocess.run([sys.executable, "manage.py", "run", "--daemon"], cwd=ROOT,
                                env=installation.env, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert f"another runner (pid {daemon.pid}) already runs" in second.stderr

        state = installation.wait(crawl_id, lambda c: c["status"] == "complete")
    assert state["pages_done"] == 6
    assert (installation.data_dir / "run" / "redis.json").stat().st_mode & 0o777 == 0o600
    log = (installation.data_dir / "daemon-0.log").read_text()
    password = json.loads((installation.data_dir / "run" / "redis.json").read_text())["password"]
    assert password not in log
    assert f"[runner] crawl {crawl_id[:8]} complete" in log

    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0
    # No crawl keeps state in it: the embedded Redis stopped with the daemon.
    assert processes_mentioning("redis-server 127.0.0.1:" + str(
        json.loads((installation.data_dir / "run" / "redis.json").read_text())["port"])) == []


def kill_9_then_restart(installation) -> tuple[str, dict]:
    with slow_site(pages=30, delay=0.2) as site:
        first = installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=30)
        first.kill()  # kill -9: no clean-up at all
        first.wait()
        installation.start_daemon()
        state = installation.wait(crawl_id, lambda c: c["status"] not in (
            "running", "starting", "queued", "generate_wacz", "pending_wait"))
    assert state["status"] == "complete", state
    assert state["pages_done"] == 31
    files = installation.query("SELECT path, size, sha256 FROM crawls_crawlfile WHERE crawl_id = ?", crawl_id)
    assert len(files) == 1
    path, size, digest = files[0]
    assert (installation.data_dir / path).stat().st_size == size and sha256(installation.data_dir / path) == digest
    assert list((installation.data_dir / "archives").rglob("*.wacz")) == [installation.data_dir / path]
    return crawl_id, state


def test_kill_9_of_the_daemon_mid_crawl_then_a_restart_completes_it_once(installation):
    crawl_id, _ = kill_9_then_restart(installation)
    processes = installation.query("SELECT status, exit_code FROM crawls_process WHERE crawl_id = ?", crawl_id)
    assert processes == [("exited", 0)]  # adopted, never launched twice
    assert [pid for pid in processes_mentioning(str(installation.data_dir))
            if pid != installation.daemons[1].pid] == []


@pytest.mark.docker
def test_kill_9_of_the_daemon_with_docker_adopts_the_container_and_leaves_none(
        data_dir, docker_client, crawler_image):
    from archiver.conf import Settings
    from runner.launchers import install_id

    installation = Installation(data_dir, launcher="docker")
    installation.env["ARCHIVER_CRAWLER_IMAGE"] = crawler_image
    installation.migrate()
    label = f"archiver.install={install_id(Settings(data_dir=data_dir))}"
    try:
        crawl_id, _ = kill_9_then_restart(installation)
        processes = installation.query(
            "SELECT status, exit_code, container_id FROM crawls_process WHERE crawl_id = ?", crawl_id)
        assert [(status, code) for status, code, _ in processes] == [("exited", 0)]
        assert docker_client.containers.list(all=True, filters={"label": label}) == []
    finally:
        installation.clean_up()
        for container in docker_client.containers.list(all=True, filters={"label": label}):
            container.remove(force=True)


def test_the_daemon_restarts_its_embedded_redis_when_it_dies_and_the_crawl_ends_clearly(installation):
    with slow_site(pages=20, delay=0.15) as site:
        installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=30)
        state_file = installation.data_dir / "run" / "redis.json"
        before = json.loads(state_file.read_text())
        os.kill(before["pid"], signal.SIGKILL)

        state = installation.wait(crawl_id, lambda c: c["status"] in ("complete", "failed"), timeout=90)
    after = json.loads(state_file.read_text())
    assert after["port"] == before["port"] and after["pid"] != before["pid"]
    assert state["status"] == "complete" or state["error"], state
    assert installation.daemons[0].poll() is None  # the daemon stayed up
    log = (installation.data_dir / "daemon-0.log").read_text()
    assert "Redis does not answer" in log and before["password"] not in log


def test_sighup_stops_the_daemon_cleanly_and_hands_its_leases_back(installation):
    # Slow enough that the crawler is still at work however long a loaded machine takes to
    # stop the daemon (30 pages of 0.2 s ended before a SIGHUP'd daemon under load exited).
    with slow_site(pages=100, delay=1.0) as site:
        daemon = installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 1, timeout=30)
        daemon.send_signal(signal.SIGHUP)
        assert daemon.wait(timeout=15) == 0
        (owner,) = installation.query("SELECT lease_owner FROM crawls_crawl WHERE id = ?", crawl_id)[0]
        assert owner == ""  # handed back, due now, for the next runner
        assert processes_mentioning(f"crawl-{crawl_id}-0") or processes_mentioning(crawl_id)
    log = (installation.data_dir / "daemon-0.log").read_text()
    assert "SIGHUP: finishing this tick" in log


def gen_pages(site) -> set[str]:
    return {path for path in site.routes if path.startswith("/gen/") and path.endswith(("/", ".html"))}


def test_pause_then_a_daemon_restart_then_resume_archives_each_page_once(installation):
    with slow_site(pages=20, delay=1.0) as site:
        first = installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 2)
        # The crawl is still running when `pause` (a new process, which takes seconds to
        # start on a loaded machine) arrives: the site answers nothing meanwhile.
        site.hold()
        installation.manage("pause", crawl_id)
        wait_for(lambda: installation.flag_raised(crawl_id, "paused"), what="the daemon asking to pause")
        site.release()
        installation.wait(crawl_id, lambda c: c["status"] == "paused")
        assert installation.stop_daemon(first) == 0

        installation.start_daemon()
        installation.manage("resume", crawl_id)
        state = installation.wait(crawl_id, lambda c: c["status"] == "complete")
        requests = dict(site.requests)
    pages = gen_pages(site)
    assert state["pages_done"] == len(pages) == 21
    assert {path: requests[path] for path in pages if requests[path] != 1} == {}  # each fetched once
    files = installation.files(crawl_id)
    assert len(files) == 2
    assert_disjoint_archives([path for path, _ in files], {site.root + path for path in pages})
    assert state["size_bytes"] == sum(size for _, size in files)


def test_a_due_schedule_queues_exactly_one_crawl(installation):
    with slow_site(pages=2, delay=0.01) as site:
        # Yearly: a slot of its own would otherwise come due while a slow machine crawls.
        out = installation.manage("schedule", "add", "0 0 1 1 *", site.url)
        schedule_id = int(out.split()[1].rstrip(":"))
        installation.start_daemon()
        # Due now instead of next New Year.
        installation.query("UPDATE crawls_schedule SET retry_at = '2000-01-01 00:00:00' WHERE id = ?", schedule_id)
        wait_for(lambda: installation.query("SELECT id FROM crawls_crawl"), what="the schedule's crawl")
        ((crawl_id,),) = installation.query("SELECT id FROM crawls_crawl WHERE schedule_id = ?", schedule_id)
        state = installation.wait(crawl_id, lambda c: c["status"] == "complete")
        time.sleep(1)  # more ticks: the slot is not fired again
    assert state["pages_done"] == 3
    assert installation.query("SELECT count(*) FROM crawls_crawl") == [(1,)]
    ((retry_at, last_crawl),) = installation.query(
        "SELECT retry_at, last_crawl_id FROM crawls_schedule WHERE id = ?", schedule_id)
    assert last_crawl == crawl_id and retry_at > "2001"


def test_a_full_disk_pauses_the_daemons_crawls_and_space_returning_resumes_them(installation):
    disk = installation.data_dir / "disk-used-percent"
    installation.env["ARCHIVER_TEST_DISK_USED_FILE"] = str(disk)
    with slow_site(pages=20, delay=0.1) as site:
        installation.start_daemon()
        crawl_id = installation.manage("add", site.url).strip()
        installation.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=30)
        disk.write_text("95")
        paused = installation.wait(crawl_id, lambda c: c["status"] == "paused")
        assert paused["waiting_reason"] == "paused: disk 95 % full (limit 90 %)"
        waiting_id = installation.manage("add", site.url).strip()
        waiting = installation.wait(waiting_id, lambda c: c["status"] == "waiting_capacity")
        assert waiting["waiting_reason"] == "waiting: disk 95 % full (limit 90 %)"

        disk.write_text("40")
        first = installation.wait(crawl_id, lambda c: c["status"] == "complete")
        second = installation.wait(waiting_id, lambda c: c["status"] == "complete")
    assert first["pages_done"] == second["pages_done"] == 21
    assert first["waiting_reason"] == ""
    assert len(installation.files(crawl_id)) == 2

"""The database going away under a running daemon: a PostgreSQL cluster of the test's own
restarted mid-crawl or stopped, and SQLite locked by another writer (docs/runner.md,
"Outages")."""

from __future__ import annotations

import contextlib
import secrets
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pg_cluster
from tests.api.servers import ROOT, Server, server_env, wait_until_serving
from tests.chaos.harness import Trial, chaos_site
from tests.chaos.trials import database_restart_trial, stop_without_database_trial
from tests.ports import free_port
from tests.s3server import stop_process
from tests.waiting import HANG, wait_for

pytestmark = pytest.mark.slow

LOST_OR_TWICE = ("incomplete", "crawled_twice", "pages_twice", "pages_missing", "files_missing",
                 "archives_unrecorded", "wacz_invalid", "webhook_events_missing")


@pytest.fixture
def cluster():
    if reason := pg_cluster.missing():
        pytest.skip(reason)
    with pg_cluster.PrivateCluster.start() as cluster:
        yield cluster


def test_a_postgresql_restart_mid_crawl_loses_and_repeats_nothing(chaos_root, cluster):
    result = database_restart_trial(chaos_root, cluster, crawls=3, later=2, pages=12,
                                    delay=0.3, timeout=60)
    counts = {key: result[key] for key in LOST_OR_TWICE}
    assert counts == dict.fromkeys(counts, 0), result
    assert result["crawls"] == 5  # the 2 added after the restart started and completed too
    assert result["running_at_restart"] >= 1, result  # else the restart was not mid-crawl
    assert result["daemon_alive"], result
    assert result["tracebacks"] == 0, result.get("log_tail")
    # Logged when it starts and when it ends, not per tick: a handful of lines.
    assert result["outage_lines"] <= 12, result.get("log_tail")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_daemon_while_its_database_is_down(chaos_root, cluster, signum):
    # docs/runner.md promises 10 s; bench/chaos.py measures it, here a generous deadline.
    result = stop_without_database_trial(chaos_root, cluster, signum, timeout=60)
    log = result["log"]
    assert result["exit_code"] == 0, f"{result['stop_seconds']} s after {signum.name}\n{log[-3000:]}"
    assert result["tracebacks"] == 0, log[-3000:]
    # unavailable (the loop, the webhook and review threads), stopping, leases not given back
    assert result["outage_lines"] <= 6, log[-3000:]


@contextlib.contextmanager
def sqlite_locked(trial: Trial, mode: str = "IMMEDIATE"):
    """Another writer (the admin, a CLI command, a backup) holds the database's write lock."""
    lock = sqlite3.connect(trial.database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        lock.execute(f"BEGIN {mode}")
        yield
    finally:
        lock.rollback()
        lock.close()


def daemon_waiting_on_the_lock(trial: Trial, since: int) -> bool:
    """The daemon's loop said it waits (runner/outage.py), in its log after byte `since`."""
    text = trial.logs[0].read_text(errors="replace")[since:]
    return "runner: the database is unavailable (OperationalError: database is locked)" in text


@pytest.mark.parametrize("mode", ["IMMEDIATE", "EXCLUSIVE"])
def test_sqlite_locked_by_another_writer_for_seconds_is_waited_out(chaos_root, mode):
    with chaos_site(trees=2, pages=20, delay=0.2) as site, Trial(chaos_root) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        trial.start_daemon(data_dir)
        trial.daemon_ready(data_dir)
        ids = [trial.add(data_dir, site.tree_url(k)) for k in range(2)]
        for crawl_id in ids:
            trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 1, timeout=30)
        locked = trial.logs[0].stat().st_size
        with sqlite_locked(trial, mode):  # held past the runner's 3 s busy wait, till it says so
            wait_for(lambda: daemon_waiting_on_the_lock(trial, locked), 60, 0.1, "the wait said")
        statuses = trial.wait_final(ids, timeout=60)
        result = trial.audit(site, ids)
        log = trial.log_tail(1_000_000)
        during = trial.logs[0].read_text(errors="replace")[locked:]
    assert set(statuses.values()) == {"complete"}, (statuses, log[-3000:])
    assert (result["pages_missing"], result["pages_twice"], result["archives_unrecorded"]) == (0, 0, 0), result
    assert result["tracebacks"] == 0, log[-3000:]
    # Once when it starts and once when it ends, per loop (the tick and its threads).
    lines = [line for line in during.splitlines() if "database" in line]
    assert len(lines) <= 12, "\n".join(lines)
    assert any("the database is back" in line for line in lines), during[-3000:]


def test_sigterm_while_another_writer_holds_sqlite_stops_the_daemon(chaos_root):
    # SQLite waits for a lock inside the query, where no signal handler runs: the runner's
    # queries wait 3 s for it, not the 30 s the admin's do (a SIGTERM then took over 45 s).
    with chaos_site(trees=1, pages=40, delay=0.3) as site, Trial(chaos_root) as trial:
        data_dir = trial.add_data_dir()
        trial.migrate()
        daemon = trial.start_daemon(data_dir)
        trial.daemon_ready(data_dir)
        crawl_id = trial.add(data_dir, site.tree_url(0))
        trial.wait_crawl(crawl_id, lambda c: c["pages_done"] >= 1, timeout=30)
        with sqlite_locked(trial):  # the whole time: the daemon stops without the database
            daemon.send_signal(signal.SIGTERM)
            try:
                code = daemon.wait(timeout=HANG)
            except subprocess.TimeoutExpired:
                code = None
        log = trial.log_tail(100_000)
    assert code == 0, f"not stopped {HANG:g} s after SIGTERM\n{log[-3000:]}"
    assert trial.tracebacks() == 0, log[-3000:]


@contextlib.contextmanager
def web_server(cluster, folder: Path, app: str = "archiver.wsgi:application"):
    """The admin and API under gunicorn (one worker, one thread: one kept connection) on
    the test's own cluster; the server, and a staff user's API token and password."""
    env = server_env(folder)
    env["ARCHIVER_DATABASE_URL"] = cluster.url
    password = secrets.token_urlsafe(16)

    def manage(*args: str, **extra: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**env, **extra},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    manage("migrate", "-v0")
    manage("collectstatic", "--noinput", "-v0")  # the admin's pages name their static files
    manage("createsuperuser", "--noinput", "--username", "clerk", "--email", "c@example.com",
           DJANGO_SUPERUSER_PASSWORD=password)
    token = manage("token", "create", "outage", "--user", "clerk")
    port = free_port()
    log = folder / "gunicorn.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", app, "--bind", f"127.0.0.1:{port}",
             "--workers", "1", "--threads", "1", "--graceful-timeout", "5"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", folder, env, process, log)
    try:
        wait_until_serving(server)
        yield server, token, password
    finally:
        stop_process(process)


def test_the_admin_and_the_api_answer_across_a_database_restart_and_503_while_it_is_down(
        cluster, chaos_root):
    with web_server(cluster, chaos_root) as (server, token, password), \
            server.client(token) as api, server.client() as admin:
        admin.get("/admin/login/")
        logged_in = admin.post("/admin/login/?next=/admin/", data={
            "username": "clerk", "password": password,
            "csrfmiddlewaretoken": admin.cookies["csrftoken"]})
        assert logged_in.status_code == 302, logged_in.text[:500]

        def answers() -> tuple[int, int]:
            return (api.get("/api/v1/crawls").status_code,
                    admin.get("/admin/crawls/crawl/").status_code)

        assert answers() == (200, 200)
        cluster.restart()
        assert answers() == (200, 200)  # the first request after: the kept connection is renewed

        cluster.stop()
        down_api, down_admin = api.get("/api/v1/crawls"), admin.get("/admin/crawls/crawl/")
        cluster.start_again()
        assert answers() == (200, 200)
        log = server.log.read_text()
    assert down_api.status_code == 503, down_api.text[:500]
    assert down_api.json()["code"] == "database_unavailable"
    assert down_api.headers["Retry-After"]
    assert down_admin.status_code == 503, down_admin.text[:500]
    assert down_admin.headers["Content-Type"].startswith("text/plain")
    assert "database is unavailable" in down_admin.text
    assert "Traceback" not in log, log[-3000:]

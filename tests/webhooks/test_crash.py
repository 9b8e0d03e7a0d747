"""Deliverers as separate processes on a file database: one killed with SIGKILL mid-delivery
(after restart the event arrives again, with the same event id, and the delivery ends in
exactly one outcome), and several racing for the same outbox (each event sent once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("outbox_worker.py")

pytestmark = pytest.mark.slow


def worker(env, *args, **kwargs):
    return subprocess.Popen([sys.executable, str(WORKER), *args], cwd=ROOT, env=env, **kwargs)


def run(env, *args) -> str:
    result = subprocess.run([sys.executable, str(WORKER), *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def env(tmp_path, receiver):
    """A migrated file SQLite database, with the receiver allowed."""
    env = {**os.environ, "ARCHIVER_DATA_DIR": str(tmp_path),
           "ARCHIVER_WEBHOOK_ALLOW_HOSTS": receiver.where, "DJANGO_SETTINGS_MODULE": "archiver.settings"}
    env.pop("ARCHIVER_DATABASE_URL", None)
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
                   cwd=ROOT, env=env, check=True, timeout=120)
    return env


def finish(process: subprocess.Popen, timeout: float = 60) -> None:
    try:
        _, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err


def test_a_delivery_cut_short_by_kill_9_is_delivered_after_restart_with_the_same_event_id(env, receiver):
    from tests.webhooks.receivers import Reply

    run(env, "setup", receiver.url())
    receiver.then(Reply(hang=True))

    first = worker(env, "dispatch", "2", stderr=subprocess.DEVNULL)
    try:
        assert receiver.got_request.wait(30), "the first deliverer never sent"
        (row,) = json.loads(run(env, "show"))
        assert row["status"] == "delivering" and row["attempts"] == 1
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    finish(worker(env, "dispatch", "2", stderr=subprocess.PIPE))

    (row,) = json.loads(run(env, "show"))
    assert (row["status"], row["attempts"], row["retry_at"]) == ("succeeded", 2, None)
    cut, delivered = receiver.received
    assert cut.signed and delivered.signed
    assert cut.headers["X-Archiver-Event-Id"] == delivered.headers["X-Archiver-Event-Id"] == row["event_id"]
    assert cut.headers["X-Archiver-Delivery"] == delivered.headers["X-Archiver-Delivery"]
    assert cut.body == delivered.body


def test_two_dispatchers_of_two_threads_each_deliver_every_event_exactly_once(env, receiver):
    run(env, "setup", receiver.url(), "30")
    workers = [worker(env, "dispatch", "60", "2", stderr=subprocess.PIPE) for _ in range(2)]
    for process in workers:
        finish(process)

    rows = json.loads(run(env, "show"))
    assert {row["status"] for row in rows} == {"succeeded"} and len(rows) == 30
    ids = [r.headers["X-Archiver-Event-Id"] for r in receiver.received]
    assert sorted(ids) == sorted(row["event_id"] for row in rows)
    assert all(r.signed for r in receiver.received)

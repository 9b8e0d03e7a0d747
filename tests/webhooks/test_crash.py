"""A deliverer killed with SIGKILL mid-delivery: after restart the event arrives again,
with the same event id, and the delivery ends in exactly one outcome."""

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


def test_a_delivery_cut_short_by_kill_9_is_delivered_after_restart_with_the_same_event_id(
        tmp_path, receiver):
    from tests.webhooks.conftest import Reply

    env = {**os.environ, "ARCHIVER_DATA_DIR": str(tmp_path),
           "ARCHIVER_WEBHOOK_ALLOW_HOSTS": receiver.where, "DJANGO_SETTINGS_MODULE": "archiver.settings"}
    env.pop("ARCHIVER_DATABASE_URL", None)
    subprocess.run([sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
                   cwd=ROOT, env=env, check=True, timeout=120)
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

    second = worker(env, "dispatch", "2", stderr=subprocess.PIPE)
    try:
        _, err = second.communicate(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert second.returncode == 0, err

    (row,) = json.loads(run(env, "show"))
    assert (row["status"], row["attempts"], row["retry_at"]) == ("succeeded", 2, None)
    cut, delivered = receiver.received
    assert cut.signed and delivered.signed
    assert cut.headers["X-Archiver-Event-Id"] == delivered.headers["X-Archiver-Event-Id"] == row["event_id"]
    assert cut.headers["X-Archiver-Delivery"] == delivered.headers["X-Archiver-Delivery"]
    assert cut.body == delivered.body

"""No secret on any command line: every local user reads every process's arguments (`ps`,
/proc/<pid>/cmdline), so while a real crawl runs (the local launcher, the embedded Redis with
its per-crawl ACL users, a webhook receiver on 127.0.0.1, archives going to an S3 server)
the test reads the argv of every process again and again and finds none of the secrets."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from runner.progress import crawl_password
from tests.s3server import ACCESS_KEY, SECRET_KEY, MotoServer, new_bucket, storage_env
from tests.sitegen import serve_site

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class ArgvWatch:
    """Every distinct command line of every process on the host, read until stopped."""

    def __init__(self):
        self.seen: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            self.seen.update(read_all_argv())

    def mentioning(self, text: str) -> list[str]:
        return [argv.decode(errors="replace") for argv in self.seen if text.encode() in argv]


def read_all_argv() -> set[bytes]:
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    found.add(handle.read(1 << 16))
            except OSError:  # gone meanwhile, or not ours to read
                continue
    return found


@pytest.fixture
def data_dir():
    path = Path(tempfile.mkdtemp(prefix="aargv-", dir="/tmp"))  # short: the wake socket lives here
    yield path
    embedded = path / "run" / "redis.json"
    if embedded.exists():  # should the embedded Redis still run, it is this test's to stop
        pid = json.loads(embedded.read_text())["pid"]
        try:
            if b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
        except FileNotFoundError:  # `run` stopped it
            pass
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def s3_endpoint(tmp_path):
    server = MotoServer(tmp_path / "moto.log")
    yield server.url
    server.stop()


def test_no_secret_is_on_any_command_line_while_a_crawl_runs_with_a_webhook(data_dir, receiver, s3_endpoint):
    webhook_secret = secrets.token_hex(24)
    receiver.secret = webhook_secret
    env = {**os.environ, "ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_LAUNCHER": "local",
           "ARCHIVER_WEBHOOK_ALLOW_HOSTS": receiver.where, "ARCHIVER_POLL_INTERVAL": "0.2",
           "DJANGO_SETTINGS_MODULE": "archiver.settings", **storage_env(s3_endpoint, new_bucket(s3_endpoint))}
    for name in ("ARCHIVER_DATABASE_URL", "ARCHIVER_REDIS_URL"):  # SQLite, and the embedded Redis
        env.pop(name, None)

    def archiver(*args, stdin=None, timeout=120):
        result = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=timeout, input=stdin)
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    with serve_site() as site, ArgvWatch() as watch:
        archiver("migrate", "-v", "0")
        archiver("webhook", "add", receiver.url(), "--secret-file", "-", stdin=webhook_secret + "\n")
        archiver("add", site.url)
        archiver("run", "--no-live", timeout=240)

    assert receiver.events() == ["crawl.queued", "crawl.started", "crawl.completed"]
    assert all(r.signed for r in receiver.received)  # signed with the secret given on stdin
    (crawl,) = json.loads(archiver("status", "--json").stdout)
    assert crawl["status"] == "complete" and crawl["files"]
    redis_password = json.loads((data_dir / "run" / "redis.json").read_text())["password"]
    # The watch saw the processes that hold the secrets: the crawler and the Redis server.
    assert watch.mentioning(crawl["id"]) and watch.mentioning("redis-server")
    for name, secret in [("webhook secret", webhook_secret), ("Redis admin password", redis_password),
                         ("the crawl's Redis password", crawl_password(redis_password, crawl["id"])),
                         ("S3 access key", ACCESS_KEY), ("S3 secret key", SECRET_KEY)]:
        assert not watch.mentioning(secret), f"the {name} was on a command line"

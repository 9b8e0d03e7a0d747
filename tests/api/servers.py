"""The API under gunicorn for the API tests: the server, its environment, its database file,
and an httpx client that reconnects when the server closed an idle connection."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from tests.installation import GUNICORN_LIMITS
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_DOMAIN = "hooks.example.invalid"  # the only domain a webhook may name: nothing resolves
RECEIVER = "127.0.0.1:9"  # a plain-http webhook receiver the SSRF rules allow (nothing listens)
# Requests a client may send twice: the same answer, and no second write (RFC 9110 9.2.2).
REPEATABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


def repeatable(request: httpx.Request) -> bool:
    """Whether `request` may be sent again: an idempotent method, or a POST with an Idempotency-Key."""
    return request.method in REPEATABLE_METHODS or "Idempotency-Key" in request.headers


class ReconnectingTransport(httpx.BaseTransport):
    """httpx's transport, sending a repeatable request once more if its connection died unanswered.

    gunicorn closes a kept-alive connection after 2 s idle. A request sent as it does so (a
    client that polls, on a busy machine) meets a closed connection before any answer:
    `RemoteProtocolError` "Server disconnected" or a reset. The pool then drops that
    connection, so the second attempt goes out on a new one. Errors while reading the body
    are not repeated here (the answer had begun), nor is any other POST.
    """

    LOST = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)

    def __init__(self, **kwargs):
        self._transport = httpx.HTTPTransport(**kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self._transport.handle_request(request)
        except self.LOST:
            if not repeatable(request):
                raise
        return self._transport.handle_request(request)

    def close(self) -> None:
        self._transport.close()


def http_client(base_url: str, **kwargs) -> httpx.Client:
    """A client for the server under test: 30 s timeout, repeatable requests survive a dropped connection."""
    return httpx.Client(base_url=base_url, transport=ReconnectingTransport(), **{"timeout": 30, **kwargs})


@dataclass
class Server:
    url: str
    data_dir: Path
    env: dict
    process: subprocess.Popen
    log: Path

    @property
    def database(self) -> Path:
        return self.data_dir / "archiver.sqlite3"

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                                capture_output=True, text=True, timeout=120)
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def client(self, secret: str | None = None, **kwargs) -> httpx.Client:
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        return http_client(self.url, headers=headers, **kwargs)


def server_env(data_dir: Path, **extra: str) -> dict:
    env = {**os.environ, "ARCHIVER_DATA_DIR": str(data_dir), "ARCHIVER_SECRET_KEY": "api-tests-only",
           "ARCHIVER_WEBHOOK_ALLOW_DOMAINS": WEBHOOK_DOMAIN, "ARCHIVER_WEBHOOK_ALLOW_HOSTS": RECEIVER,
           "PYTHONUNBUFFERED": "1", **extra}
    for name in ("ARCHIVER_REDIS_URL", "ARCHIVER_DATABASE_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    return env


@contextmanager
def gunicorn(data_dir: Path, **extra_env: str):
    """Migrate and collect static files in `data_dir`, then serve it until the block ends."""
    env = server_env(data_dir, **extra_env)
    for command in (["migrate", "-v0"], ["collectstatic", "--noinput", "-v0"]):
        result = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    port = free_port()
    log = data_dir / "gunicorn.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "archiver.wsgi:application", "--bind", f"127.0.0.1:{port}", "--umask", "0077",
             "--workers", "2", "--threads", "2", "--access-logfile", "-", "--graceful-timeout", "5",
             *GUNICORN_LIMITS],  # as scripts/start.sh serves the API
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )
    server = Server(f"http://127.0.0.1:{port}", data_dir, env, process, log)
    try:
        wait_until_serving(server)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_serving(server: Server, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"gunicorn exited: {server.log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{server.url}/api/v1/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gunicorn did not answer: {server.log.read_text()[-3000:]}")


@contextmanager
def database_file(path: Path):
    """Point this process's default connection at the SQLite file `path` for a while.

    The test database pytest-django may hold open (SQLite in memory) is set aside, not
    closed, and comes back afterwards.
    """
    conn = connections[DEFAULT_DB_ALIAS]
    if conn.vendor != "sqlite":
        pytest.skip("the API tests share the server's SQLite file")
    saved_settings, saved_connection = conn.settings_dict, conn.connection
    conn.connection = None
    conn.settings_dict = {**saved_settings, "NAME": str(path)}
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict, conn.connection = saved_settings, saved_connection


def empty_tables() -> None:
    """Everything a test may have written, so the next starts from a fresh installation."""
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.models import Session

    from crawls.models import (
        ApiToken,
        BrowserProfile,
        Crawl,
        IdempotencyKey,
        Org,
        OrgUsage,
        RunnerRecord,
        Schedule,
        Webhook,
    )

    for model in (IdempotencyKey, ApiToken, Webhook, Crawl, Schedule, OrgUsage, RunnerRecord, BrowserProfile,
                  User, Group, Session):
        model.objects.all().delete()
    Org.objects.exclude(slug="default").delete()
    Org.objects.update_or_create(slug="default", defaults={
        "name": "Default", "max_concurrent_crawls": None, "storage_quota_bytes": None,
        "exec_minutes_quota": None, "max_pages_per_crawl": None, "bytes_stored": 0})

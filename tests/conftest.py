"""Fixtures shared by the whole suite: a private Redis server and the Docker engine.

Tests that need Redis get their own redis-server on a free port (never the machine's
6379), so they may flush, stop or restart it freely.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from archiver import conf as _conf

# The suite's sites and receivers live on 127.0.0.1, which the crawl address policy refuses
# by default; tests of the policy itself set their own list (tests/test_crawl_address_policy.py).
# pytest-django has read the settings already (archiver.settings calls conf.get()), so the
# cached copy is dropped; daemons and crawlers the tests start inherit the variable.
os.environ.setdefault("ARCHIVER_CRAWL_ALLOW_NETWORKS", "127.0.0.0/8")
_conf.get.cache_clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen
    databases: int = 256

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


def start_redis(tmp: Path, databases: int = 256, port: int | None = None) -> RedisServer:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not on PATH (scripts/test.sh installs it)")
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--databases", str(databases), "--dir", str(tmp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60  # a process starting on a busy machine
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return RedisServer(port=port, process=proc, databases=databases)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    pytest.fail("redis-server did not start")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.process.terminate()
    server.process.wait(timeout=10)


_db_numbers = itertools.count(1)


@pytest.fixture
def redis_url(redis_server) -> str:
    """A flushed Redis database of the private server, different for every test."""
    import redis

    db = next(_db_numbers) % redis_server.databases or 1
    url = redis_server.url(db)
    redis.Redis.from_url(url).flushdb()
    return url


def docker_unavailable_reason() -> str | None:
    # A missing socket is answered without a client: a failed connect inside the SDK
    # leaks a socket, whose ResourceWarning would then fail some unrelated test.
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://") and not Path(host.removeprefix("unix://")).exists():
        return f"no Docker engine socket at {host}; run scripts/test.sh"
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine"
        return f"no Docker engine reachable ({type(exc).__name__}); run scripts/test.sh"
    return None


@pytest.fixture(scope="session")
def docker_client():
    """The real Docker engine. Skips where none answers, fails when CI requires one."""
    reason = docker_unavailable_reason()
    if reason:
        if os.environ.get("ARCHIVER_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    import docker

    return docker.from_env()


@pytest.fixture(scope="session")
def crawler_image(docker_client) -> str:
    from archiver.conf import default_crawler_image

    tag = os.environ.get("ARCHIVER_CRAWLER_IMAGE", default_crawler_image())
    try:
        docker_client.images.get(tag)
    except Exception as exc:  # noqa: BLE001
        message = f"crawler image {tag} is not built ({type(exc).__name__}); run scripts/build-crawler-image.sh"
        if os.environ.get("ARCHIVER_REQUIRE_DOCKER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return tag


@pytest.fixture
def admin_settings(settings, tmp_path):
    """Admin pages without collectstatic (unhashed assets) and with a fast password hasher."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STATIC_ROOT = tmp_path / "static"
    settings.STATIC_ROOT.mkdir()
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }

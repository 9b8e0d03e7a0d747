"""Fixtures shared by the whole suite: a private Redis server and the Docker engine.

Tests that need Redis get their own redis-server on a free port (never the machine's
6379), so they may flush, stop or restart it freely.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from archiver import conf as _conf
from tests.private_redis import start_redis

# The suite's sites and receivers live on 127.0.0.1, which the crawl address policy refuses
# by default; tests of the policy itself set their own list (tests/test_crawl_address_policy.py).
# pytest-django has read the settings already (archiver.settings calls conf.get()), so the
# cached copy is dropped; daemons and crawlers the tests start inherit the variable.
os.environ.setdefault("ARCHIVER_CRAWL_ALLOW_NETWORKS", "127.0.0.0/8")
# New crawls default to browser mode when a Chromium is found; tests crawl over HTTP unless
# they ask for the browser (ARCHIVER_CHROMIUM=/usr/bin/chromium, or unset for the default).
os.environ.setdefault("ARCHIVER_CHROMIUM", "none")
# The suite crawls its own sites on 127.0.0.1 as fast as they answer; tests of the host
# budget give their crawls a rate (tests/crawler/test_host_budget.py).
os.environ.setdefault("ARCHIVER_HOST_RATE", "0")
_conf.get.cache_clear()


@pytest.fixture(autouse=True)
def _default_org(request):
    """The org migration 0002 makes, there for every test that uses the database.

    A transactional test ends with a flush, which drops migration data too; under xdist the
    next test on that worker then met "no org 'default'" (seen in CI)."""
    names = set(request.fixturenames)
    if names & {"transactional_db", "live_server"}:
        request.getfixturevalue("transactional_db")
    elif "db" in names:
        request.getfixturevalue("db")
    elif request.node.get_closest_marker("django_db"):
        request.getfixturevalue("_django_db_helper")
    else:
        return
    from crawls.models import Org

    Org.objects.get_or_create(slug="default", defaults={"name": "Default"})


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


@pytest.fixture
def conf_data_dir(tmp_path, monkeypatch) -> Path:
    """A data dir of the test's own, and archiver's settings pointing at it."""
    from archiver.conf import Settings

    root = tmp_path / "data"
    root.mkdir()
    settings = Settings(data_dir=root, host_rate=0.0)  # as ARCHIVER_HOST_RATE above
    monkeypatch.setattr("archiver.conf.get", lambda: settings)
    return root


@pytest.fixture
def log_in_staff(client, db):
    """Logs the test client in as a staff user who holds only the permissions
    `Permission.objects.filter(**which)` finds (none without a filter); returns the user."""
    from django.contrib.auth.models import Permission, User

    def log_in(name: str = "clerk", **which) -> User:
        user = User.objects.create_user(name, password="a-long-passphrase-1", is_staff=True)
        if which:
            user.user_permissions.set(Permission.objects.filter(**which))
        client.force_login(user)
        return user

    return log_in


def pytest_collection_modifyitems(config, items):
    """The costliest files first (tests/costly_files.txt, from tests/costs.py): pytest-xdist
    hands files out in this order (scripts/test.sh turns off its own reordering by test count,
    which put the few-test, minutes-long chaos trials last, to run alone at the end)."""
    from tests.costs import listed

    rank = {path: index for index, path in enumerate(listed())}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))

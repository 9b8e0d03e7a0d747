"""Factories for runner tests: settings on a short temp data dir, a store on the private
Redis, crawls, and a Runner wired to a launcher of the test's choosing."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
from pathlib import Path

import pytest
import redis

from archiver.conf import Settings
from crawls.config import CrawlConfig
from crawls.models import Crawl, Org
from runner.daemon import Runner
from runner.launchers import LocalLauncher
from runner.progress import ProgressStore
from runner.redis_server import EmbeddedRedis, RedisEndpoint
from tests.fakes import FakeLauncher, MemoryStore
from tests.runner.step_helpers import T0


@pytest.fixture
def data_dir():
    # Short, so the wake socket's path fits a Unix socket address.
    path = Path(tempfile.mkdtemp(prefix="arun-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def settings(data_dir) -> Settings:
    return Settings(data_dir=data_dir, launcher="local", poll_interval=0.2, lease_seconds=5,
                    max_concurrent_crawls=2, max_launch_attempts=3, host_rate=0.0)


@pytest.fixture
def embedded_redis(settings):
    """Make embedded Redis servers as the runner runs them (with this test's settings unless
    given others). At the end each is stopped, and every redis-server it started (one a test
    killed and the watch restarted too) is gone."""
    made: list[tuple[EmbeddedRedis, list]] = []

    def make(with_settings: Settings | None = None) -> EmbeddedRedis:
        server = EmbeddedRedis(with_settings or settings)
        started: list = []
        original = server._start

        def start(port, password):
            endpoint = original(port, password)
            started.append(server.process)
            return endpoint

        server._start = start
        made.append((server, started))
        return server

    yield make
    for server, started in made:
        server.stop()
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture
def embedded(embedded_redis) -> EmbeddedRedis:
    """A running embedded Redis with this test's settings."""
    server = embedded_redis()
    server.ensure()
    return server


@pytest.fixture
def endpoint(redis_server) -> RedisEndpoint:
    return RedisEndpoint(host="127.0.0.1", port=redis_server.port, databases=redis_server.databases)


@pytest.fixture
def store(endpoint):
    store = ProgressStore(endpoint)
    yield store
    store.close()
    # The runner allocates databases from 1 up: leave them empty for the next test.
    client = redis.Redis(host=endpoint.host, port=endpoint.port)
    for db in range(1, 12):
        client.execute_command("SELECT", db)
        client.flushdb()
    client.close()


@pytest.fixture
def memory_store():
    """The store over an in-memory Redis: for step tests that need no server. A test
    module uses it everywhere by defining `store` as `memory_store`."""
    store = MemoryStore()
    yield store
    store.close()


@pytest.fixture
def org(db) -> Org:
    return Org.objects.get_or_create(slug="default")[0]


@pytest.fixture
def make_crawl(org):
    def make(*seeds: str, org: Org = org, now: dt.datetime | None = None, **config) -> Crawl:
        config = CrawlConfig(seeds=list(seeds or ["http://127.0.0.1:9/"]), **config)
        return Crawl.create(org, config, now=now)

    return make


@pytest.fixture
def fake() -> FakeLauncher:
    return FakeLauncher()


def no_host_limit(crawl):
    return None


@pytest.fixture
def make_runner(settings, store):
    made = []

    def make(launcher=None, settings: Settings = settings, clock=None, store=store, **options) -> Runner:
        options.setdefault("host_check", no_host_limit)
        runner = Runner(settings, launcher or LocalLauncher(settings), store,
                        clock=clock or (lambda: T0), **options)
        runner.register(runner.clock())
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.launcher.close()
        for ref in list(getattr(runner.launcher, "instances", {})):
            runner.launcher.remove(ref)
        if isinstance(runner.launcher, LocalLauncher):
            for instance in runner.launcher.list():
                runner.launcher.remove(instance.ref)


@pytest.fixture
def docker_settings(settings, crawler_image):
    return settings.model_copy(update={"launcher": "docker", "crawler_image": crawler_image})


@pytest.fixture
def no_leftover_containers(docker_client, docker_settings):
    """Whatever happens in the test, no container of its installation is left."""
    from runner.launchers import install_id

    yield
    label = f"archiver.install={install_id(docker_settings)}"
    for container in docker_client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)

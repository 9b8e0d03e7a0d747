"""The Docker launcher: bounded engine calls against an engine that never answers, no pull
inside a launch, and containers found again for a Process row that never recorded them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

import pytest

from archiver.errors import EngineUnavailable, ImageMissing
from runner.launchers import CONFIG_NAME, DockerLauncher, LaunchSpec
from runner.redis_server import RedisEndpoint, answers
from tests.ports import free_port
from tests.runner.engine_sockets import HungEngine
from tests.runner.helpers import our_containers, slow_site
from tests.waiting import wait_for

PASSWORD = "d0cker-pa55word"


@pytest.fixture
def hung_engine(data_dir, monkeypatch):
    engine = HungEngine(data_dir / "hung.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    yield engine
    engine.close()


def make_spec(settings, process_id: int = 5, endpoint: RedisEndpoint | None = None, db: int = 1,
              config: dict | None = None) -> LaunchSpec:
    instance_dir = settings.crawls_dir / "d0cc" / "0"
    instance_dir.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(crawl_id="d0cc", instance=0, process_id=process_id, instance_dir=instance_dir,
                      workers=1, redis=endpoint or RedisEndpoint(host="127.0.0.1", port=9, password=PASSWORD),
                      db=db, runner_id="r", config=config or {"seeds": ["http://127.0.0.1:9/"]})


@pytest.mark.slow
def test_every_engine_call_gives_up_within_its_timeout_on_an_engine_that_never_answers(
        settings, hung_engine):
    settings = settings.model_copy(update={"docker_timeout": 1.0, "launcher": "docker"})
    launcher = DockerLauncher(settings)
    spec = make_spec(settings)
    calls = {
        "list": launcher.list,
        "inspect": lambda: launcher.inspect("0123abcd"),
        "launch": lambda: launcher.launch(spec),
        "remove": lambda: launcher.remove("0123abcd"),
        "log_tail": lambda: launcher.log_tail("0123abcd"),
        "find": lambda: launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir),
    }
    took = {}
    for name, call in calls.items():
        started = time.monotonic()
        with pytest.raises(EngineUnavailable):
            call()
        took[name] = time.monotonic() - started
    started = time.monotonic()
    assert launcher.ping() is False and launcher.has_image() is False
    took["ping+has_image"] = (time.monotonic() - started) / 2
    launcher.close()
    # The setting's 1 s, not the default's 5 s (slack for a busy machine; the engine never
    # answers, so without a timeout each call would wait for ever).
    assert max(took.values()) < 5, took
    assert len(hung_engine.conns) >= len(calls)  # each of them did reach the engine


def test_the_default_timeout_is_well_under_the_lease(data_dir):
    from archiver.conf import Settings, from_environ
    from archiver.errors import ConfigError

    assert Settings(data_dir=data_dir).docker_call_timeout == 5
    assert Settings(data_dir=data_dir, lease_seconds=6).docker_call_timeout == 2
    with pytest.raises(ConfigError, match="ARCHIVER_DOCKER_TIMEOUT: .*at most a third of ARCHIVER_LEASE"):
        from_environ({"ARCHIVER_DOCKER_TIMEOUT": "20", "ARCHIVER_LEASE_SECONDS": "30"})
    with pytest.raises(ConfigError, match="ARCHIVER_DOCKER_TIMEOUT"):
        from_environ({"ARCHIVER_DOCKER_TIMEOUT": "0"})
    assert from_environ({"ARCHIVER_DOCKER_TIMEOUT": "2.5"}).docker_call_timeout == 2.5


# --- on the real engine ---------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(("image", "fix"), [
    ("archiver/crawler:not-built-0", "build it with scripts/build-crawler-image.sh"),
    ("registry.invalid/someone/crawler:1", "run `archiver pull` (or `docker pull registry.invalid/someone/crawler:1`)"),
])
def test_a_missing_image_is_never_pulled_and_says_how_to_get_it(
        docker_settings, docker_client, no_leftover_containers, image, fix):
    launcher = DockerLauncher(docker_settings, image=image)
    started = time.monotonic()
    with pytest.raises(ImageMissing) as raised:
        launcher.launch(make_spec(docker_settings))
    launcher.close()
    assert str(raised.value) == f"crawler image {image} is not on the Docker engine; {fix}"
    assert time.monotonic() - started < docker_settings.docker_call_timeout
    assert docker_client.images.list(name=image) == []
    assert our_containers(docker_client, docker_settings) == []


@pytest.fixture
def endpoint(tmp_path) -> RedisEndpoint:
    """A Redis of this test's own, with a password (the crawler finds it in its config file)."""
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--requirepass", PASSWORD, "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = RedisEndpoint(host="127.0.0.1", port=port, password=PASSWORD)
    try:
        wait_for(lambda: answers(endpoint, timeout=1), what="redis-server answering")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def crawling_spec(docker_settings, endpoint):
    """A spec whose crawler really crawls (a slow site, a Redis with a password) for a while."""
    with slow_site(pages=30, delay=0.3) as site:
        yield make_spec(docker_settings, endpoint=endpoint, db=4,
                        config={"seeds": [site.url], "allowNetworks": ["127.0.0.0/8"]})


@pytest.mark.docker
@pytest.mark.slow
def test_a_container_whose_row_was_never_updated_is_found_and_never_started_twice(
        docker_settings, docker_client, no_leftover_containers, crawling_spec, endpoint):
    spec = crawling_spec
    launcher = DockerLauncher(docker_settings)
    first = launcher.launch(spec)  # ... and the daemon dies before it records `first`
    launcher.close()

    again = DockerLauncher(docker_settings)
    found = again.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir)
    assert found is not None and found.running and found.ref == first.ref
    client = endpoint.client(4)
    # It crawls: it read the password from crawler.json.
    wait_for(lambda: client.exists("d0cc:d"), pause=0.2, what="the crawler's progress",
             explain=lambda: again.log_tail(first.ref))
    client.close()
    assert found.process_id == spec.process_id and found.crawl_id == spec.crawl_id
    assert again.launch(spec).ref == first.ref
    assert [c.id for c in our_containers(docker_client, docker_settings)] == [first.ref]
    assert again.find(spec.process_id + 1, spec.crawl_id, spec.instance, spec.instance_dir) is None

    # contained: read-only root with a small /tmp, bounded logs, nofile; no password anywhere
    attrs = docker_client.api.inspect_container(first.ref)
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True and "size=256m" in host["Tmpfs"]["/tmp"]
    assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}}
    assert {"Name": "nofile", "Soft": 4096, "Hard": 4096} in host["Ulimits"]
    assert PASSWORD not in json.dumps(attrs) and PASSWORD not in " ".join(first.args)
    assert "--redisStoreUrl" not in attrs["Args"]
    config_file = spec.instance_dir / CONFIG_NAME
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert json.loads(config_file.read_text())["redisStoreUrl"] == endpoint.url(4, host="redis")
    if os.geteuid() == 0:
        assert (config_file.stat().st_uid, config_file.stat().st_gid) == (1000, 1000)
    again.remove(first.ref)
    assert again.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir) is None
    again.close()


@pytest.mark.docker
@pytest.mark.slow
def test_a_container_created_but_never_started_is_cleared_by_find_then_launched_once(
        docker_settings, docker_client, no_leftover_containers, crawling_spec):
    spec = crawling_spec
    launcher = DockerLauncher(docker_settings)
    # The launch cut between create and start (a kill -9 there):
    created = launcher._create(spec, launcher._prepare(spec))
    assert launcher.inspect(created).running is False

    assert launcher.find(spec.process_id, spec.crawl_id, spec.instance, spec.instance_dir) is None
    assert our_containers(docker_client, docker_settings) == []
    launched = launcher.launch(spec)
    (container,) = our_containers(docker_client, docker_settings)
    assert container.id == launched.ref and container.status == "running"
    launcher.remove(launched.ref)
    launcher.close()


@pytest.mark.docker
@pytest.mark.slow
def test_a_launch_retried_after_a_create_it_never_heard_back_from_takes_that_container_over(
        docker_settings, docker_client, no_leftover_containers, crawling_spec):
    spec = crawling_spec
    launcher = DockerLauncher(docker_settings)
    launcher._create(spec, launcher._prepare(spec))  # reply lost

    launched = launcher.launch(spec)  # the daemon's retry of the same row
    (container,) = our_containers(docker_client, docker_settings)
    assert container.id == launched.ref and container.status == "running"
    launcher.remove(launched.ref)
    launcher.close()

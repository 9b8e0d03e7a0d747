"""Real crawls in containers from the crawler image, on the real engine."""

from __future__ import annotations

import os
import stat

import pytest

from crawls.lease import db_now
from crawls.models import CrawlStatus, ProcessStatus
from runner.launchers import DockerLauncher
from tests.runner.engine_sockets import UnixForwarder
from tests.runner.helpers import is_final, our_containers, sha256, status_of
from tests.sitegen import serve_site
from tests.waiting import drive

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.docker, pytest.mark.slow]


def test_a_crawl_in_a_container_completes_with_a_verified_wacz(
        make_runner, make_crawl, docker_settings, docker_client, no_leftover_containers, store):
    launcher = DockerLauncher(docker_settings)
    runner = make_runner(launcher, settings=docker_settings, clock=db_now)
    with serve_site() as site:
        crawl = make_crawl(site.url, workers=2)
        drive(runner, lambda: status_of(crawl) == S.RUNNING, timeout=20)
        (container,) = our_containers(docker_client, docker_settings)
        config = container.attrs["HostConfig"]
        assert config["NetworkMode"] == "host" and config["CapDrop"] == ["ALL"]
        assert config["Memory"] == 2**30 + 768 * 2**20 and config["NanoCpus"] == 1_500_000_000
        assert "no-new-privileges" in config["SecurityOpt"] and config["PidsLimit"] > 0
        assert config["ReadonlyRootfs"] is True and "/tmp" in config["Tmpfs"]
        assert config["LogConfig"]["Config"] == {"max-size": "10m", "max-file": "3"}
        assert [u["Name"] for u in config["Ulimits"]] == ["nofile"]
        assert container.attrs["Config"]["Hostname"] == f"crawl-{crawl.pk}-0"
        assert container.attrs["Config"]["User"] != "" and "docker.sock" not in str(config["Binds"])
        drive(runner, is_final(crawl), timeout=90)

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.snapshots.count() == crawl.pages_done >= 10
    (record,) = crawl.files.all()
    path = docker_settings.data_dir / record.path
    assert record.size == path.stat().st_size and record.sha256 == sha256(path)
    kept = path.stat()  # written by the container's user, kept as the runner's own
    assert (kept.st_uid, kept.st_gid, stat.S_IMODE(kept.st_mode)) == (os.geteuid(), os.getegid(), 0o600)
    (process,) = crawl.processes.all()
    assert process.status == ProcessStatus.EXITED and process.exit_code == 0
    assert process.launcher == "docker" and process.container_id
    assert our_containers(docker_client, docker_settings) == []
    assert store.client(1).dbsize() == 0


@pytest.fixture
def forwarder(data_dir, monkeypatch, docker_client):
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        pytest.skip("the engine is not on a Unix socket")
    fwd = UnixForwarder(data_dir / "fwd.sock", host.removeprefix("unix://"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{fwd.path}")
    try:
        yield fwd
    finally:
        fwd.off()


def test_an_unreachable_engine_keeps_the_daemon_up_and_crawls_wait_then_proceed(
        make_runner, make_crawl, docker_settings, forwarder, no_leftover_containers):
    launcher = DockerLauncher(docker_settings)
    runner = make_runner(launcher, settings=docker_settings, clock=db_now)
    with serve_site() as site:
        crawl = make_crawl(site.url, depth=1)
        drive(runner, lambda: status_of(crawl) == S.WAITING_CAPACITY, timeout=20)
        crawl.refresh_from_db()
        assert crawl.waiting_reason == "waiting: Docker engine unreachable"
        for _ in range(5):
            runner.tick()  # still up, still waiting

        forwarder.on()
        drive(runner, is_final(crawl), timeout=90)
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.waiting_reason == "" and crawl.files.count() == 1


def test_a_browser_mode_crawl_in_archivers_own_image_archives_the_script_built_pages(
        make_runner, make_crawl, docker_settings, docker_client, no_leftover_containers):
    # The image build puts Debian's chromium in the base (scripts/build-crawler-image.sh).
    from tests.jssite import js_pages, js_site

    launcher = DockerLauncher(docker_settings)
    runner = make_runner(launcher, settings=docker_settings, clock=db_now)
    with serve_site(extra=js_site(7)) as site:
        crawl = make_crawl(site.root + "/js/", workers=2, browser=True)
        drive(runner, is_final(crawl), timeout=240)
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert "--browser" in crawl.processes.get().args
    done = set(crawl.snapshots.filter(status="done").values_list("url", flat=True))
    assert js_pages(site.root, 7) <= done
    assert our_containers(docker_client, docker_settings) == []

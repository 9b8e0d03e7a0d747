"""Container limits follow the workers within what the engine's machine has, and a refusal no
retry can change fails the launch at once with the engine's words (issue 44)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawls.lease import db_now
from crawls.models import CrawlStatus
from runner.launchers import DockerLauncher, LaunchSpec
from runner.launchers import engine as engine_module
from runner.launchers.base import GiB, MiB
from runner.launchers.engine import Host, Limits, Prepared, limits, refusal_is_permanent
from runner.launchers.swarm import SwarmLauncher, _node_host
from runner.redis_server import RedisEndpoint
from tests.runner.helpers import is_final, our_containers
from tests.sitegen import serve_site
from tests.waiting import drive

S = CrawlStatus
TWO_CPUS = Host(cpus=2.0, memory=24 * GiB)


def spec_of(workers: int) -> LaunchSpec:
    return LaunchSpec(crawl_id="c1", instance=0, process_id=1, instance_dir=Path("/nonexistent"),
                      workers=workers, redis=RedisEndpoint(host="127.0.0.1", port=9), db=1, runner_id="r")


def test_cpus_grow_with_the_workers_up_to_the_host_s_cpus():
    assert [limits(spec_of(w), TWO_CPUS).nano_cpus for w in (1, 2, 3, 4, 8)] == [
        900_000_000, 1_500_000_000, 2_000_000_000, 2_000_000_000, 2_000_000_000]


def test_memory_grows_with_the_workers_up_to_the_host_s_memory():
    assert limits(spec_of(4), TWO_CPUS).memory == GiB + 3 * 768 * MiB
    assert limits(spec_of(4), Host(cpus=2.0, memory=2 * GiB)).memory == 2 * GiB


def test_shared_memory_grows_with_the_workers_within_a_quarter_of_the_memory():
    assert [limits(spec_of(w), TWO_CPUS).shm // MiB for w in (1, 2, 4)] == [256, 384, 640]
    assert limits(spec_of(8), Host(cpus=8.0, memory=2 * GiB)).shm == GiB // 2


def test_without_the_host_s_figures_the_limits_are_the_workers_own():
    assert limits(spec_of(4), None) == Limits(nano_cpus=2_700_000_000, memory=GiB + 3 * 768 * MiB,
                                              shm=640 * MiB)
    assert Host.of_info({"NCPU": 2, "MemTotal": 25_276_194_816}) == Host(cpus=2.0, memory=25_276_194_816)
    assert Host.of_info({}) is None and Host.of_info({"NCPU": 0, "MemTotal": 5}) is None


def test_a_swarm_node_s_figures_are_its_described_resources():
    node = {"Description": {"Resources": {"NanoCPUs": 4_000_000_000, "MemoryBytes": 8 * GiB}}}
    assert _node_host(node) == Host(cpus=4.0, memory=8 * GiB)
    assert _node_host({"Description": {}}) is None


def test_a_swarm_service_reserves_and_limits_within_its_largest_node_and_mounts_its_shm(settings):
    launcher = SwarmLauncher(settings)
    launcher._host = Host(cpus=2.0, memory=2 * GiB)  # as _read_host found the nodes
    template = launcher._task_template(spec_of(4), Prepared(args=[], user="1000:1000", redis_alias=False),
                                       "sha256:0", [])
    assert template["Resources"]["Limits"]["NanoCPUs"] == 2_000_000_000
    assert template["Resources"]["Reservations"] == {"NanoCPUs": 2_000_000_000, "MemoryBytes": 2 * GiB}
    (shm,) = [m for m in template["ContainerSpec"]["Mounts"] if m["Target"] == "/dev/shm"]
    assert shm["Type"] == "tmpfs" and shm["TmpfsOptions"]["SizeBytes"] == GiB // 2


def test_only_refusals_of_the_request_itself_are_permanent():
    assert refusal_is_permanent(400, "Range of CPUs is from 0.01 to 2.00, as there are only 2 CPUs available")
    assert refusal_is_permanent(400, "Unknown runtime specified nosuch")
    assert refusal_is_permanent(500, "invalid volume specification: '/x:y:rw': invalid mount config")
    assert not refusal_is_permanent(409, "Conflict. The container name is already in use")
    assert not refusal_is_permanent(500, "failed to create task: context deadline exceeded")
    assert not refusal_is_permanent(None, "")



@pytest.mark.django_db
@pytest.mark.docker
@pytest.mark.slow
def test_a_refusal_no_retry_can_change_fails_the_crawl_at_once_with_the_engine_s_words(
        make_runner, make_crawl, docker_settings, no_leftover_containers, monkeypatch):
    # Past the host's CPUs, as the limits were before they were bounded by them.
    monkeypatch.setattr(engine_module, "limits", lambda spec, host: Limits(
        nano_cpus=int(host.cpus * 1e9) + 10**9, memory=GiB, shm=256 * MiB))
    runner = make_runner(DockerLauncher(docker_settings), settings=docker_settings, clock=db_now)
    crawl = make_crawl("http://127.0.0.1:9/", workers=4)
    drive(runner, is_final(crawl), timeout=60)
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED
    assert "cannot launch its crawler" in crawl.error and "Range of CPUs is from 0.01" in crawl.error
    assert crawl.processes.count() == 1  # not five attempts


@pytest.mark.django_db
@pytest.mark.docker
@pytest.mark.slow
def test_a_browser_crawl_at_four_workers_in_docker_completes_within_the_host_s_cpus(
        make_runner, make_crawl, docker_settings, docker_client, no_leftover_containers):
    from tests.jssite import js_pages, js_site

    launcher = DockerLauncher(docker_settings)
    host = launcher.host()
    runner = make_runner(launcher, settings=docker_settings, clock=db_now)
    with serve_site(extra=js_site(7)) as site:
        crawl = make_crawl(site.root + "/js/", workers=4, browser=True)
        drive(runner, lambda: our_containers(docker_client, docker_settings) or is_final(crawl)(), timeout=60)
        (container,) = our_containers(docker_client, docker_settings)
        config = container.attrs["HostConfig"]
        assert config["NanoCpus"] == min(int(2.7e9), int(host.cpus * 1e9))
        assert config["Memory"] == min(GiB + 3 * 768 * MiB, host.memory) and config["ShmSize"] == 640 * MiB
        drive(runner, is_final(crawl), timeout=240)
    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    done = set(crawl.snapshots.filter(status="done").values_list("url", flat=True))
    assert js_pages(site.root, 7) <= done
    assert our_containers(docker_client, docker_settings) == []

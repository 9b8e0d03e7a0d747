"""ARCHIVER_LAUNCHER=swarm on a real single-node Swarm: crawls end to end, pause/resume, scale
2 → 1, a daemon killed -9 and its successor adopting the services by label.

The swarm runs on a second private engine (scripts/docker-engine.sh with its own data-root,
socket and ARCHIVER_DOCKER_SWARM_ADDR), never on the suite's shared engine: `swarm init` and
`swarm leave` there would change the engine under every other test run on this machine. The
crawler image is copied to it from the shared engine when its id differs. The fixture holds
a lease on that engine; the last lease released stops it (its swarm stays in its data-root).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from archiver.conf import Settings
from archiver.errors import ConfigError, EngineUnavailable
from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, ProcessStatus
from crawls.profiles import add_profile, profile_path
from runner.launchers import LaunchSpec, SwarmLauncher, hostname, install_id, make_launcher
from runner.launchers.engine import folder_user
from runner.launchers.swarm import newest
from runner.redis_server import RedisEndpoint
from tests.installation import Installation
from tests.profile_tars import good_profile
from tests.runner.engine_sockets import HungEngine
from tests.runner.helpers import (
    archived_bytes,
    assert_disjoint_archives,
    fetched_more_than_once,
    gen_pages,
    is_final,
    kept_files,
    pause_and_resume,
    sha256,
    slow_site,
)
from tests.sitegen import serve_site
from tests.waiting import HANG, drive, wait_for, wait_for_exit, wait_for_pages

S = CrawlStatus
ROOT = Path(__file__).resolve().parents[2]
SWARM_ENGINE = {"ARCHIVER_DOCKER_ROOT": "/var/lib/archiver-docker-swarm",
                "ARCHIVER_DOCKER_RUN": "/run/archiver-swarm", "ARCHIVER_DOCKER_SWARM_ADDR": "127.0.0.1:2477"}
SWARM_HOST = "unix:///run/archiver-swarm/docker.sock"
pytestmark = [pytest.mark.django_db, pytest.mark.docker, pytest.mark.slow]


def unavailable(reason: str):
    if os.environ.get("ARCHIVER_REQUIRE_DOCKER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def engine_script(command: str) -> None:
    result = subprocess.run(["bash", "scripts/docker-engine.sh", command, str(os.getpid())], cwd=ROOT,
                            env={**os.environ, **SWARM_ENGINE}, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        unavailable(f"the swarm engine would not {command}: {result.stderr[-2000:]}")


def copy_image(source, target, tag: str) -> None:
    """`tag` on `target` as it is on `source` (an image the tag named before is dropped)."""
    import docker.errors

    wanted = source.images.get(tag).id
    before = {image.id for image in target.images.list() if tag in image.tags}
    if wanted not in {image.id for image in target.images.list()}:
        for _ in target.api.load_image(source.api.get_image(tag)):
            pass  # the engine's progress: the load is done when it ends
    target.api.tag(wanted, *tag.rsplit(":", 1))
    for stale in before - {wanted}:
        with contextlib.suppress(docker.errors.APIError):  # still used by a container
            target.images.remove(stale)


@pytest.fixture(scope="session")
def swarm_client(docker_client, crawler_image):
    """A client of the swarm engine, which holds the crawler image of the shared engine."""
    import docker

    if os.geteuid() != 0:
        unavailable("starting the swarm's own dockerd needs root")
    engine_script("acquire")
    client = docker.DockerClient(base_url=SWARM_HOST, timeout=120)
    try:
        copy_image(docker_client, client, crawler_image)
        yield client
    finally:
        client.close()
        engine_script("release")


@pytest.fixture
def swarm_settings(settings, crawler_image, swarm_client, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", SWARM_HOST)
    return settings.model_copy(update={
        "launcher": "swarm", "crawler_image": crawler_image, "swarm_constraints": ("node.role==manager",),
        "swarm_org_constraints": {"default": ("node.platform.os==linux",)}})


def our_services(client, settings: Settings) -> list:
    return client.services.list(filters={"label": f"archiver.install={install_id(settings)}"})


@pytest.fixture
def no_leftover_services(swarm_client, swarm_settings):
    """Whatever happens in the test, no service of its installation is left."""
    yield
    for service in our_services(swarm_client, swarm_settings):
        service.remove()


@pytest.fixture
def swarm_runner(make_runner, swarm_settings, no_leftover_services):
    return make_runner(SwarmLauncher(swarm_settings), settings=swarm_settings, clock=db_now)


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def assert_contained(client, service_id: str, crawl: Crawl) -> None:
    """The service asks for what a crawler container gets, and its crawler runs with it."""
    spec = client.api.inspect_service(service_id)["Spec"]
    template, container = spec["TaskTemplate"], spec["TaskTemplate"]["ContainerSpec"]
    memory, cpus = 2**30 + 768 * 2**20, 1_500_000_000  # two workers
    assert spec["Mode"] == {"Replicated": {"Replicas": 1}} and template["RestartPolicy"]["Condition"] == "none"
    assert len(template["Networks"]) == 1  # `host`, by the id Swarm gave it (its container: below)
    assert template["Resources"] == {"Limits": {"NanoCPUs": cpus, "MemoryBytes": memory, "Pids": 512},
                                     "Reservations": {"NanoCPUs": cpus, "MemoryBytes": memory}}
    assert template["Placement"]["Constraints"] == ["node.role==manager", "node.platform.os==linux"]
    assert template["LogDriver"] == {"Name": "json-file", "Options": {"max-size": "10m", "max-file": "3"}}
    assert container["Image"].startswith("sha256:") and container["Command"][:2] == ["setpriv", "--no-new-privs"]
    assert container["CapabilityDrop"] == ["ALL"] and container["ReadOnly"] is True
    assert container["Hostname"] == hostname(crawl.pk, 0) and container["Hosts"] == ["127.0.0.1 redis"]
    assert container["Ulimits"] == [{"Name": "nofile", "Soft": 4096, "Hard": 4096}]
    assert container["User"] == "1000:1000" and "docker.sock" not in json.dumps(container["Mounts"])
    (shm,) = [m for m in container["Mounts"] if m["Target"] == "/dev/shm"]  # 256 MiB + 128 a worker
    assert shm["Type"] == "tmpfs" and shm["TmpfsOptions"]["SizeBytes"] == 384 * 2**20
    assert spec["Labels"]["archiver.crawl"] == crawl.pk and spec["Labels"]["archiver.instance"] == "0"
    task = newest(client.api.tasks(filters={"service": service_id}))
    pid = task["Status"]["ContainerStatus"]["PID"]
    status = proc_status(pid)
    assert status["NoNewPrivs"].strip() == "1" and int(status["CapEff"], 16) == 0
    tmp = [line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if " /tmp " in line]
    assert tmp and {"nosuid", "nodev", "noexec"} <= set(tmp[0].split()[5].split(","))
    shm_lines = [line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if " /dev/shm " in line]
    assert shm_lines and "size=393216k" in shm_lines[-1]  # not Docker's default 64 MiB
    attrs = client.api.inspect_container(task["Status"]["ContainerStatus"]["ContainerID"])
    assert attrs["HostConfig"]["NetworkMode"] == "host"


def test_a_crawl_through_swarm_services_completes_with_a_verified_wacz(
        swarm_runner, make_crawl, swarm_settings, swarm_client, store):
    runner = swarm_runner
    # slow.html, linked from the first page, holds one worker for 15 s: the crawler is still
    # there when its process is inspected (a fast one had exited, and /proc/PID was gone).
    with serve_site(slow_delay=15) as site:
        crawl = make_crawl(site.url, workers=2)
        wait_for_pages(runner, crawl, 1)
        (service,) = our_services(swarm_client, swarm_settings)
        assert_contained(swarm_client, service.id, crawl)
        drive(runner, is_final(crawl), timeout=90)

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.snapshots.count() == crawl.pages_done >= 10
    (record,) = crawl.files.all()
    path = swarm_settings.data_dir / record.path
    assert record.size == path.stat().st_size and record.sha256 == sha256(path)
    (process,) = crawl.processes.all()
    assert process.status == ProcessStatus.EXITED and process.exit_code == 0
    assert process.launcher == "swarm" and process.container_id == service.id
    assert our_services(swarm_client, swarm_settings) == []
    assert store.client(1).dbsize() == 0





def test_pause_and_resume_through_swarm_archive_each_page_once(
        swarm_runner, make_crawl, swarm_settings, swarm_client):
    crawl = pause_and_resume(swarm_runner, make_crawl, swarm_settings,
                             lambda: our_services(swarm_client, swarm_settings))
    assert list(crawl.processes.values_list("exit_code", flat=True)) == [0, 0]


def test_scaling_from_two_to_one_shares_one_queue_and_fetches_each_page_once(
        swarm_runner, make_crawl, swarm_settings, swarm_client):
    runner = swarm_runner
    with slow_site(pages=60, delay=0.1) as site:
        crawl = make_crawl(site.url, scale=2)
        second = hostname(crawl.pk, 1)
        # Pages are named after their kept WACZ only once it is kept: the second instance's
        # progress is its archive/ bytes in Redis, while the crawl goes on with both.
        drive(runner, lambda: archived_bytes(runner, crawl, second) > 0
              and Crawl.objects.get(pk=crawl.pk).pages_done >= 6, timeout=40)
        assert len(our_services(swarm_client, swarm_settings)) == 2

        call_command("scale", crawl.pk, "1", stdout=io.StringIO())
        drive(runner, lambda: not crawl.processes.filter(instance=1, status__in=(
            ProcessStatus.STARTING, ProcessStatus.RUNNING)).exists(), timeout=30)
        done_at_scale_down = Crawl.objects.get(pk=crawl.pk).pages_done
        assert len(our_services(swarm_client, swarm_settings)) == 1
        drive(runner, is_final(crawl), timeout=60)
        twice = fetched_more_than_once(site)

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.pages_done == 61 and twice == {}
    assert done_at_scale_down < 61  # instance 0 went on alone
    (scaled_down,) = crawl.processes.filter(instance=1)
    assert scaled_down.exit_code == 0
    paths = kept_files(crawl, swarm_settings)
    assert {path.name.split("-")[1] for path in paths} == {"0", "1"} and len(paths) == 2
    assert_disjoint_archives(paths, gen_pages(site))
    assert our_services(swarm_client, swarm_settings) == []


def test_kill_9_of_the_daemon_then_a_new_one_adopts_the_service_by_label_and_crawls_each_page_once(
        data_dir, swarm_client, crawler_image):
    installation = Installation(data_dir, launcher="swarm")
    installation.env.update(DOCKER_HOST=SWARM_HOST, ARCHIVER_CRAWLER_IMAGE=crawler_image)
    installation.migrate()
    settings = Settings(data_dir=data_dir)
    try:
        with slow_site(pages=30, delay=0.2) as site:
            first = installation.start_daemon()
            crawl_id = installation.manage("add", site.url).strip()
            installation.wait(crawl_id, lambda c: c["pages_done"] >= 3, timeout=40)
            (service,) = our_services(swarm_client, settings)
            password = json.loads((data_dir / "run" / "redis.json").read_text())["password"]
            assert password not in json.dumps(service.attrs)  # it is in crawler.json only
            first.kill()  # kill -9: no clean-up at all
            first.wait()
            assert [s.id for s in our_services(swarm_client, settings)] == [service.id]  # it runs on
            installation.start_daemon()
            state = installation.wait(crawl_id, lambda c: c["status"] == "complete", timeout=90)
            twice = fetched_more_than_once(site)
        assert state["pages_done"] == 31 and twice == {}
        processes = installation.query(
            "SELECT status, exit_code, container_id FROM crawls_process WHERE crawl_id = ?", crawl_id)
        assert processes == [("exited", 0, service.id)]  # adopted, never launched twice
        ((path, size, digest),) = installation.query(
            "SELECT path, size, sha256 FROM crawls_crawlfile WHERE crawl_id = ?", crawl_id)
        assert (data_dir / path).stat().st_size == size and sha256(data_dir / path) == digest
        assert_disjoint_archives([data_dir / path], gen_pages(site))
        assert our_services(swarm_client, settings) == []
    finally:
        installation.clean_up()
        for leftover in our_services(swarm_client, settings):
            leftover.remove()


# --- the launcher on its own ----------------------------------------------------------------


def spec_for(settings: Settings, config: dict, process_id: int = 5, org: str = "") -> LaunchSpec:
    instance_dir = settings.crawls_dir / "5a7" / "0"
    instance_dir.mkdir(parents=True, exist_ok=True)
    return LaunchSpec(crawl_id="5a7", instance=0, process_id=process_id, instance_dir=instance_dir,
                      workers=1, redis=RedisEndpoint(host="127.0.0.1", port=9), db=1, runner_id="r",
                      config=config, org=org)


def test_an_exit_code_is_read_from_the_task_and_a_relaunch_of_the_row_takes_its_service_over(
        swarm_settings, no_leftover_services):
    launcher = SwarmLauncher(swarm_settings)
    spec = spec_for(swarm_settings, {"seeds": ["not-a-url"]})
    launched = launcher.launch(spec)
    assert launcher.launch(spec).ref == launched.ref  # a retried launch of the row: the same service
    ended = wait_for_exit(launcher, launched.ref)
    assert (ended.exit_code, ended.process_id, ended.crawl_id) == (4, 5, "5a7")  # a refused config
    assert "not-a-url" in launcher.log_tail(launched.ref)
    assert [i.ref for i in launcher.list()] == [launched.ref]
    assert launcher.find(5, "5a7", 0, spec.instance_dir).ref == launched.ref
    assert launcher.find(6, "5a7", 0, spec.instance_dir) is None
    launcher.remove(launched.ref)
    launcher.remove(launched.ref)  # idempotent
    assert launcher.inspect(launched.ref) is None and launcher.list() == []
    launcher.close()


def test_a_task_swarm_rejects_has_vanished_and_its_log_says_why(swarm_settings, no_leftover_services):
    launcher = SwarmLauncher(swarm_settings)
    spec = spec_for(swarm_settings, {"seeds": ["http://127.0.0.1:9/"]})
    launched = launcher.launch(spec)
    spec.instance_dir.rename(spec.instance_dir.with_name("gone"))  # as on a node without the folder
    ended = wait_for_exit(launcher, launched.ref)
    assert ended.exit_code is None  # never ran: the runner relaunches it as vanished
    assert "swarm task" in launcher.log_tail(launched.ref)
    launcher.remove(launched.ref)
    launcher.close()


def test_a_task_no_node_has_room_for_waits_and_its_log_says_why(swarm_settings, no_leftover_services):
    settings = swarm_settings.model_copy(update={"swarm_org_constraints": {"big": ("node.labels.archiver==none",)}})
    launcher = SwarmLauncher(settings)
    launched = launcher.launch(spec_for(settings, {"seeds": ["http://127.0.0.1:9/"]}, org="big"))
    wait_for(lambda: "no suitable node" in launcher.log_tail(launched.ref), pause=0.2,
             what="the task's wait in its log", explain=lambda: launcher.log_tail(launched.ref))
    assert launcher.inspect(launched.ref).running  # pending, not ended
    launcher.remove(launched.ref)
    launcher.close()


def test_a_service_runs_as_its_folder_s_owner_with_the_crawl_s_profile_mounted_read_only(
        swarm_settings, swarm_client, no_leftover_services, org, tmp_path):
    add_profile(org, "login", good_profile(tmp_path / "login.tar.gz"), swarm_settings.data_dir, timezone.now())
    profile = profile_path(swarm_settings.data_dir, org.pk, "login")
    launcher = SwarmLauncher(swarm_settings)
    spec = replace(spec_for(swarm_settings, {"seeds": ["http://127.0.0.1:9/"]}),
                   browser_args=("--blockAds",), profile=profile)
    launched = launcher.launch(spec)  # archiver's crawler refuses the flag and exits: never mind
    try:
        container = swarm_client.api.inspect_service(launched.ref)["Spec"]["TaskTemplate"]["ContainerSpec"]
    finally:
        launcher.remove(launched.ref)
        launcher.close()
    assert container["User"] == folder_user(spec.instance_dir)
    assert container["Args"][-3:] == launched.args[-3:] == ["--blockAds", "--profile", "/profile/login.tar.gz"]
    mounts = {mount["Target"]: mount for mount in container["Mounts"]}
    assert mounts["/profile/login.tar.gz"]["Source"] == str(profile)
    assert mounts["/profile/login.tar.gz"]["ReadOnly"] is True
    assert not mounts["/crawls"].get("ReadOnly")
    assert str(profile) not in json.dumps(container["Args"])  # the host's path stays on the host


def test_a_swarm_manager_is_taken_at_start(swarm_settings):
    launcher = make_launcher(swarm_settings)
    assert isinstance(launcher, SwarmLauncher) and launcher._node_id
    launcher.close()


def test_an_engine_that_is_not_a_swarm_manager_is_refused_at_start(settings, docker_client, crawler_image):
    info = docker_client.info()
    if info["Swarm"]["LocalNodeState"] != "inactive":
        pytest.skip("the shared engine is in a swarm")
    with pytest.raises(ConfigError, match="not a Swarm manager .*'inactive'.*docker swarm init"):
        make_launcher(settings.model_copy(update={"launcher": "swarm", "crawler_image": crawler_image}))


def test_every_swarm_call_gives_up_within_its_timeout_on_an_engine_that_never_answers(
        settings, data_dir, monkeypatch):
    engine = HungEngine(data_dir / "hung.sock")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{engine.path}")
    settings = settings.model_copy(update={"docker_timeout": 1.0, "launcher": "swarm"})
    launcher = SwarmLauncher(settings)
    spec = spec_for(settings, {"seeds": ["http://127.0.0.1:9/"]})
    calls = [launcher.list, lambda: launcher.inspect("abc"), lambda: launcher.launch(spec),
             lambda: launcher.remove("abc"), lambda: launcher.log_tail("abc"),
             lambda: launcher.find(5, "5a7", 0, spec.instance_dir)]
    try:
        for call in calls:
            connections, started = len(engine.conns), time.monotonic()
            with pytest.raises(EngineUnavailable):
                call()
            # The socket probe, then one request and so one timeout: well under the 5 s lease
            # (counted in connections: a busy machine's seconds would judge its speed).
            wait_for(lambda n=connections + 2: len(engine.conns) >= n)  # its accepts may lag
            assert len(engine.conns) == connections + 2
            assert time.monotonic() - started < HANG
    finally:
        launcher.close()
        engine.close()

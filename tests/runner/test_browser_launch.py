"""Browser options and profiles at launch: the flags and the profile reach the crawler's command
line (and, in Docker, a read-only mount) only when the runner's crawler takes them; otherwise
the crawl fails at once with a sentence that names the profile, never its path."""

from __future__ import annotations

import json
import stat
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from django.utils import timezone

from crawls.config import CrawlConfig
from crawls.models import CrawlStatus
from crawls.profiles import add_profile, profile_path
from runner.launchers import DockerLauncher, LaunchSpec, LocalLauncher
from runner.redis_server import RedisEndpoint
from tests.profile_tars import good_profile
from tests.runner.step_helpers import T0
from tests.waiting import wait_for

S = CrawlStatus
OPTIONS = dict(behaviors=["autoscroll", "siteSpecific"], page_load_timeout=45, post_load_delay=2,
               wait_until=["load", "networkidle2"], block_ads=True, screenshot=["view", "thumbnail"],
               lang="de")
FLAGS = ["--behaviors", "autoscroll,siteSpecific", "--pageLoadTimeout", "45", "--postLoadDelay", "2",
         "--waitUntil", "load,networkidle2", "--blockAds", "--screenshot", "view,thumbnail", "--lang", "de"]


@pytest.fixture
def browser_settings(settings):
    return settings.model_copy(update={"crawler_kind": "browsertrix"})


@pytest.fixture
def login_profile(org, settings, tmp_path):
    add_profile(org, "login", good_profile(tmp_path / "login.tar.gz"), settings.data_dir, timezone.now())
    return profile_path(settings.data_dir, org.pk, "login")


def test_a_browser_crawler_gets_the_flags_and_the_profile(make_runner, make_crawl, fake, browser_settings,
                                                          login_profile):
    crawl = make_crawl(**OPTIONS, profile="login")
    make_runner(fake, settings=browser_settings).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING, crawl.error
    (instance,) = fake.instances.values()
    assert instance.spec.profile == login_profile
    assert list(instance.spec.browser_args) == FLAGS
    (process,) = crawl.processes.all()
    assert process.args[-len(FLAGS):] == FLAGS


def test_browser_options_the_runner_s_crawler_cannot_take_fail_the_crawl(make_runner, make_crawl, fake):
    crawl = make_crawl(block_ads=True)  # stored before the crawler was changed (no check here)
    make_runner(fake).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and fake.launches == 0
    assert crawl.error == ("its browser options need browser mode; this runner's crawler "
                           "archiver/crawler:0.1.0 runs it over HTTP only")


def test_archiver_s_crawler_in_browser_mode_gets_browser_the_text_and_the_options(
        make_runner, make_crawl, fake, settings):
    options = {name: value for name, value in OPTIONS.items() if name != "block_ads"}
    crawl = make_crawl(browser=True, **options)
    make_runner(fake, settings=settings.model_copy(update={"chromium": None})).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING, crawl.error
    (instance,) = fake.instances.values()
    # Not the local launcher: the image's Chromium, found by the crawler's own default.
    assert list(instance.spec.browser_args) == ["--browser",
                                                *[flag for flag in FLAGS if flag != "--blockAds"]]


def test_an_http_crawl_of_archiver_s_crawler_gets_no_browser_flag(make_runner, make_crawl, fake, settings):
    crawl = make_crawl(browser=False)
    make_runner(fake, settings=settings.model_copy(update={"chromium": None})).tick(T0)
    crawl.refresh_from_db()
    (instance,) = fake.instances.values()
    assert crawl.status == S.RUNNING and instance.spec.browser_args == ()


def test_browser_mode_without_a_chromium_fails_the_crawl_saying_so(make_runner, make_crawl, fake, settings):
    crawl = make_crawl(browser=True)
    make_runner(fake, settings=settings.model_copy(update={"chromium": "none"})).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and fake.launches == 0
    assert "it runs in browser mode and this runner finds no Chromium" in crawl.error


def test_block_ads_fails_a_browser_crawl_of_archiver_s_crawler(make_runner, make_crawl, fake, settings):
    crawl = make_crawl(browser=True, block_ads=True)  # stored under another crawler
    make_runner(fake, settings=settings.model_copy(update={"chromium": None})).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and "need browsertrix-crawler" in crawl.error


def test_a_profile_gone_from_the_data_dir_fails_the_crawl_naming_it_only(
        make_runner, make_crawl, fake, browser_settings, login_profile):
    crawl = make_crawl(profile="login")
    login_profile.unlink()
    make_runner(fake, settings=browser_settings).tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.FAILED and fake.launches == 0
    assert "its browser profile 'login' is not in this runner's data dir" in crawl.error
    assert str(browser_settings.data_dir) not in crawl.error
    assert all(str(login_profile) not in log.message for log in crawl.logs.all())


def spec_with_browser(settings, profile: Path | None, instance_dir: Path) -> LaunchSpec:
    instance_dir.mkdir(parents=True, exist_ok=True)
    config = CrawlConfig(seeds=["http://127.0.0.1:9/"], **OPTIONS)
    return LaunchSpec(crawl_id="b0b0", instance=0, process_id=3, instance_dir=instance_dir, workers=1,
                      redis=RedisEndpoint(host="127.0.0.1", port=9, password="pw"), db=2, runner_id="r",
                      config={"seeds": config.seeds}, browser_args=tuple(config.browser_args()),
                      profile=profile)


REPORT = textwrap.dedent(f"""\
    #!{sys.executable}
    import json, sys
    json.dump(sys.argv[1:], open("argv.json", "w"))
""")


def test_the_local_launcher_passes_the_flags_and_the_profile_s_own_path(settings, tmp_path, login_profile):
    script = tmp_path / "report"
    script.write_text(REPORT)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    launcher = LocalLauncher(settings, command=[str(script)])
    spec = spec_with_browser(settings, login_profile, settings.crawls_dir / "b0b0" / "0")
    launched = launcher.launch(spec)
    try:
        wait_for((spec.instance_dir / "argv.json").exists, what="the crawler's argv.json")
    finally:
        launcher.remove(launched.ref)
    argv = json.loads((spec.instance_dir / "argv.json").read_text())
    assert argv[-len(FLAGS) - 2:] == [*FLAGS, "--profile", str(login_profile)]
    assert launched.args[-2:] == ["--profile", str(login_profile)]


@pytest.fixture
def browsertrix_tag(docker_client, crawler_image):
    """archiver's crawler image under a name that says browsertrix; only the tag is removed after."""
    tag = "archiver/test-browsertrix:opts"
    docker_client.images.get(crawler_image).tag(tag)
    yield tag
    docker_client.images.remove(tag)


@pytest.mark.docker
def test_a_docker_instance_gets_the_flags_and_its_profile_mounted_read_only(
        docker_client, docker_settings, browsertrix_tag, no_leftover_containers, org, login_profile):
    settings = docker_settings.model_copy(update={"crawler_image": browsertrix_tag})
    assert settings.crawler_kind == "auto" and settings.browser_crawler("docker")  # judged by the name
    launcher = DockerLauncher(settings)
    spec = spec_with_browser(settings, login_profile, settings.crawls_dir / "b0b0" / "0")
    launched = launcher.launch(spec)  # archiver's crawler refuses the flags and exits: never mind
    try:
        attrs = docker_client.api.inspect_container(launched.container_id)
    finally:
        launcher.remove(launched.ref)
        launcher.close()
    command = attrs["Config"]["Cmd"]
    assert command[-len(FLAGS) - 2:] == [*FLAGS, "--profile", "/profile/login.tar.gz"]
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts["/profile/login.tar.gz"]["Source"] == str(login_profile)
    assert mounts["/profile/login.tar.gz"]["RW"] is False
    assert mounts["/crawls"]["RW"] is True
    assert str(login_profile) not in json.dumps(command)  # the host's path stays on the host
    with tarfile.open(login_profile) as archive:  # untouched by the launch
        assert "./Default/Cookies" in archive.getnames()


def test_a_crawl_added_with_browser_reaches_the_local_crawler_process_with_browser_and_chromium(
        make_runner, org, settings, tmp_path, monkeypatch):
    """`archiver add --browser` to the local crawler's argv. The crawler here only reports its
    argv (so this runs whether or not archiver's crawler takes --browser yet); the browser-mode
    crawl itself is tests/runner/test_browser_crawl_end_to_end.py."""
    from io import StringIO

    from django.core.management import call_command

    from archiver import conf
    from crawls.models import Crawl

    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\necho 'Chromium 120'\n")
    chromium.chmod(0o755)
    monkeypatch.setenv("ARCHIVER_LAUNCHER", "local")
    monkeypatch.setenv("ARCHIVER_CHROMIUM", str(chromium))
    monkeypatch.setenv("ARCHIVER_DATA_DIR", str(settings.data_dir))
    conf.get.cache_clear()
    try:
        out = StringIO()
        call_command("add", "http://127.0.0.1:9/", "--browser", "--lang", "de", stdout=out)
    finally:
        conf.get.cache_clear()
    crawl = Crawl.objects.get(pk=out.getvalue().strip())
    assert crawl.config["browser"] is True
    script = tmp_path / "report"
    script.write_text(REPORT)
    script.chmod(0o755)
    local = settings.model_copy(update={"chromium": str(chromium)})
    runner = make_runner(LocalLauncher(local, command=[str(script)]), settings=local)
    runner.tick(T0)
    crawl.refresh_from_db()
    assert crawl.status == S.RUNNING, crawl.error
    argv_file = local.crawls_dir / crawl.pk / "0" / "argv.json"
    wait_for(argv_file.exists, what=f"{argv_file}")
    argv = json.loads(argv_file.read_text())
    # A thumbnail of every page unless told otherwise (the admin's page list shows them).
    assert argv[-7:] == ["--browser", "--screenshot", "thumbnail", "--lang", "de", "--chromium", str(chromium)]
    assert argv[argv.index("--text") + 1] == "to-pages"  # every crawler writes the page text
    assert crawl.processes.get().args[-7:] == argv[-7:]

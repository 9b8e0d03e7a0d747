"""Pause/resume and scaling with crawler containers on the real engine: every page is fetched
once and lands in exactly one kept archive."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from crawls.lease import db_now
from crawls.models import Crawl, CrawlStatus, ProcessStatus
from runner.launchers import DockerLauncher, hostname
from tests.runner.helpers import (
    archived_bytes,
    assert_disjoint_archives,
    fetched_more_than_once,
    gen_pages,
    is_final,
    kept_files,
    our_containers,
    pause_and_resume,
    slow_site,
    wacz_responses,
)
from tests.waiting import drive, wait_for_pages

S = CrawlStatus
pytestmark = [pytest.mark.django_db, pytest.mark.docker, pytest.mark.slow]






@pytest.fixture
def docker_runner(make_runner, docker_settings, no_leftover_containers):
    return make_runner(DockerLauncher(docker_settings), settings=docker_settings, clock=db_now)


def test_pause_and_resume_in_containers_archive_each_page_once(
        docker_runner, make_crawl, docker_settings, docker_client):
    crawl = pause_and_resume(docker_runner, make_crawl, docker_settings,
                             lambda: our_containers(docker_client, docker_settings))
    assert crawl.size_bytes == sum(crawl.files.values_list("size", flat=True))
    assert our_containers(docker_client, docker_settings) == []


def test_scaling_from_one_to_two_and_back_shares_one_queue_and_fetches_each_page_once(
        docker_runner, make_crawl, docker_settings, docker_client):
    runner = docker_runner
    with slow_site(pages=60, delay=0.1) as site:
        crawl = make_crawl(site.url)
        wait_for_pages(runner, crawl, 3)
        call_command("scale", crawl.pk, "2", stdout=io.StringIO())
        second, scaled_at = hostname(crawl.pk, 1), Crawl.objects.get(pk=crawl.pk).pages_done
        # Pages are named after their kept WACZ only once it is kept: the second instance's
        # progress is its archive/ bytes in Redis, while the crawl goes on with both.
        drive(runner, lambda: archived_bytes(runner, crawl, second) > 0
              and Crawl.objects.get(pk=crawl.pk).pages_done >= scaled_at + 6, timeout=30)

        call_command("scale", crawl.pk, "1", stdout=io.StringIO())
        drive(runner, lambda: not crawl.processes.filter(instance=1, status__in=(
            ProcessStatus.STARTING, ProcessStatus.RUNNING)).exists(), timeout=30)
        done_at_scale_down = Crawl.objects.get(pk=crawl.pk).pages_done
        drive(runner, is_final(crawl), timeout=60)
        twice = fetched_more_than_once(site)

    crawl.refresh_from_db()
    assert crawl.status == S.COMPLETE, crawl.error
    assert crawl.pages_done == 61 and twice == {}
    assert done_at_scale_down < 61  # instance 0 went on alone
    (scaled_down,) = crawl.processes.filter(instance=1)
    assert scaled_down.exit_code == 0
    paths = kept_files(crawl, docker_settings)
    by_instance = {path.name.split("-")[1]: path for path in paths}
    assert set(by_instance) == {"0", "1"} and len(paths) == 2
    assert wacz_responses(by_instance["1"])  # the second instance archived pages of the shared queue
    assert_disjoint_archives(paths, gen_pages(site))
    assert our_containers(docker_client, docker_settings) == []

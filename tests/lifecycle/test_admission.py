"""Who may start: storage and execution quotas, the org's concurrency, the host's room."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from crawls import admission
from crawls.admission import (
    HostUsage,
    memory_needed,
    read_host_usage,
    read_memory_available,
    wait_reason,
)
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Org, OrgUsage, StopReason
from crawls.quotas import admit_by_org, org_wait_reason, start_decision
from tests.lifecycle.claiming import NOW

S = CrawlStatus
GIB = 2**30


def room(crawl) -> None:
    return None


def waiting_crawls(count: int) -> list[Crawl]:
    return [Crawl(id=f"{i:032x}", created_at=NOW + dt.timedelta(seconds=i)) for i in range(count)]


# --- the org's concurrency (pure) -------------------------------------------------------------


@pytest.mark.parametrize(("running", "starting"), [(0, 2), (1, 1), (2, 0), (3, 0)])
def test_the_oldest_waiting_crawls_start_while_the_org_has_room(running, starting):
    org = Org(slug="news", max_concurrent_crawls=2)
    crawls = waiting_crawls(3)
    admitted = admit_by_org(org, running, list(reversed(crawls)))
    assert admitted.start == tuple(crawls[:starting])
    assert set(admitted.waiting) == {crawl.id for crawl in crawls[starting:]}


def test_the_others_are_told_why_they_wait():
    org = Org(slug="news", max_concurrent_crawls=2)
    admitted = admit_by_org(org, 1, waiting_crawls(3))
    assert set(admitted.waiting.values()) == {"waiting: org 'news' already runs 2 of 2 crawls"}


def test_an_org_without_a_concurrency_limit_starts_every_waiting_crawl():
    crawls = waiting_crawls(50)
    admitted = admit_by_org(Org(slug="news"), 1000, crawls)
    assert admitted.start == tuple(crawls) and admitted.waiting == {}


def test_ties_in_creation_time_are_broken_by_id():
    crawls = [Crawl(id=f"{i:032x}", created_at=NOW) for i in (3, 1, 2)]
    admitted = admit_by_org(Org(slug="news", max_concurrent_crawls=1), 0, crawls)
    assert admitted.start[0].id == f"{1:032x}"


# --- org_wait_reason reads the org's crawls -------------------------------------------------


def test_a_crawl_waits_while_its_org_runs_its_maximum(make_org, make_crawl):
    org = make_org("busy", max_concurrent_crawls=1)
    make_crawl(S.RUNNING, of=org)
    crawl = make_crawl(S.QUEUED, of=org)
    assert org_wait_reason(crawl) == "waiting: org 'busy' already runs 1 of 1 crawls"


def test_an_older_waiting_crawl_goes_first(make_org, make_crawl):
    org = make_org("busy", max_concurrent_crawls=1)
    older = make_crawl(S.WAITING_ORG_LIMIT, of=org, created_at=NOW - dt.timedelta(minutes=5))
    younger = make_crawl(S.QUEUED, of=org)
    assert org_wait_reason(older) is None
    assert org_wait_reason(younger) == "waiting: org 'busy' already runs 1 of 1 crawls"


def test_paused_finished_and_other_orgs_crawls_do_not_count(make_org, make_crawl):
    org = make_org("busy", max_concurrent_crawls=1)
    make_crawl(S.PAUSED, of=org)
    make_crawl(S.COMPLETE, of=org)
    make_crawl(S.RUNNING, of=make_org("other", max_concurrent_crawls=1))
    assert org_wait_reason(make_crawl(S.QUEUED, of=org)) is None


# --- start_decision: quotas, then the org, then the host -----------------------------------------


def test_a_crawl_of_an_org_whose_storage_is_full_is_skipped(make_org, make_crawl):
    org = make_org("full", storage_quota_bytes=1000, bytes_stored=1000)
    decision = start_decision(make_crawl(S.QUEUED, of=org), NOW, room)
    assert (decision.status, decision.stop_reason) == (S.SKIPPED_QUOTA_REACHED, StopReason.STORAGE_QUOTA)
    assert decision.reason == "org 'full' storage quota reached: 1.0 KB of 1.0 KB used"


def test_a_crawl_starts_one_byte_below_the_storage_quota(make_org, make_crawl):
    org = make_org("nearly", storage_quota_bytes=1000, bytes_stored=999)
    assert start_decision(make_crawl(S.QUEUED, of=org), NOW, room).start


def test_bytes_other_active_crawls_hold_count_before_a_start(make_org, make_crawl):
    org = make_org("nearly", storage_quota_bytes=1000, bytes_stored=500)
    make_crawl(S.RUNNING, of=org, size_bytes=500)
    decision = start_decision(make_crawl(S.QUEUED, of=org), NOW, room)
    assert decision.status == S.SKIPPED_QUOTA_REACHED


def test_a_crawl_of_an_org_out_of_execution_minutes_is_skipped(make_org, make_crawl):
    org = make_org("spent", exec_minutes_quota=10)
    OrgUsage.objects.create(org=org, month=dt.date(2026, 3, 1), exec_seconds=600)
    decision = start_decision(make_crawl(S.QUEUED, of=org), NOW, room)
    assert (decision.status, decision.stop_reason) == (S.SKIPPED_QUOTA_REACHED, StopReason.EXEC_QUOTA)


def test_last_months_minutes_do_not_count(make_org, make_crawl):
    org = make_org("spent", exec_minutes_quota=10)
    OrgUsage.objects.create(org=org, month=dt.date(2026, 2, 1), exec_seconds=6000)
    assert start_decision(make_crawl(S.QUEUED, of=org), NOW, room).start


def test_a_resumed_crawl_over_quota_is_stopped_not_skipped(make_org, make_crawl):
    org = make_org("full", storage_quota_bytes=1000, bytes_stored=1000)
    crawl = make_crawl(S.QUEUED, of=org, started_at=NOW - dt.timedelta(hours=1))
    assert start_decision(crawl, NOW, room).status == S.STOPPED_QUOTA_REACHED


def test_a_crawl_over_its_orgs_concurrency_waits_for_the_org(make_org, make_crawl):
    org = make_org("busy", max_concurrent_crawls=1)
    make_crawl(S.RUNNING, of=org)
    decision = start_decision(make_crawl(S.QUEUED, of=org), NOW, room)
    assert decision.status == S.WAITING_ORG_LIMIT
    assert decision.reason == "waiting: org 'busy' already runs 1 of 1 crawls"


def test_a_crawl_waits_for_capacity_when_the_host_has_no_room(make_crawl):
    decision = start_decision(make_crawl(S.QUEUED), NOW, lambda crawl: "waiting: disk 93 % full (limit 90 %)")
    assert (decision.status, decision.reason) == (S.WAITING_CAPACITY, "waiting: disk 93 % full (limit 90 %)")


def test_a_crawl_with_room_everywhere_starts(make_crawl):
    assert start_decision(make_crawl(S.QUEUED), NOW, room).start


# --- the host -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("used", "free", "reason"), [
    (89, 11, None),
    (90, 10, "waiting: disk 90 % full (limit 90 %)"),
    (93, 7, "waiting: disk 93 % full (limit 90 %)"),
    (100, 0, "waiting: disk 100 % full (limit 90 %)"),
])
def test_a_crawl_waits_while_the_disk_is_fuller_than_the_threshold(used, free, reason):
    usage = HostUsage(disk_used=used * GIB, disk_free=free * GIB, memory_available=64 * GIB)
    assert wait_reason(usage, disk_threshold_percent=90, memory=GIB) == reason


def test_memory_available_must_cover_what_the_crawl_needs():
    usage = HostUsage(disk_used=1, disk_free=99, memory_available=GIB - 1)
    assert wait_reason(usage, 90, memory=GIB) == "waiting: 1.1 GB of memory available, 1.1 GB needed"
    assert wait_reason(HostUsage(1, 99, memory_available=GIB), 90, memory=GIB) is None


def test_unknown_memory_does_not_hold_a_crawl_back():
    assert wait_reason(HostUsage(1, 99, memory_available=None), 90, memory=10 * GIB) is None


def test_memory_needed_grows_with_instances_and_workers():
    one = memory_needed(CrawlConfig(seeds=["https://example.com/"]))
    assert one == admission.MEMORY_PER_INSTANCE
    big = memory_needed(CrawlConfig(seeds=["https://example.com/"], scale=3, workers=4))
    assert big == 3 * (admission.MEMORY_PER_INSTANCE + 3 * admission.MEMORY_PER_EXTRA_WORKER)


def test_memavailable_is_read_from_meminfo(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684096 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n")
    assert read_memory_available(meminfo) == 2048 * 1024
    assert read_memory_available(tmp_path / "missing") is None


def test_the_real_host_is_read_for_a_data_dir_that_does_not_exist_yet(tmp_path: Path):
    usage = read_host_usage(tmp_path / "not" / "yet")
    assert usage.disk_used + usage.disk_free > 0
    assert 0 <= usage.disk_used_percent <= 100


def test_running_crawls_pause_for_a_full_disk_but_not_for_memory(monkeypatch):
    full = HostUsage(disk_used=95, disk_free=5, memory_available=0)
    monkeypatch.setattr(admission, "read_host_usage", lambda data_dir: full)
    assert admission.disk_full_reason() == "waiting: disk 95 % full (limit 90 %)"
    monkeypatch.setattr(admission, "read_host_usage", lambda data_dir: HostUsage(10, 90, 0))
    assert admission.disk_full_reason() is None


def test_a_browser_crawl_needs_chromiums_memory_and_browsertrix_its_own():
    http = CrawlConfig(seeds=["https://example.com/"], workers=2)
    browser = CrawlConfig(seeds=["https://example.com/"], workers=2, browser=True)
    mib = 2**20
    assert memory_needed(http) == 320 * mib
    assert memory_needed(browser) == 896 * mib
    assert memory_needed(browser, browsertrix=True) == 1792 * mib
    # 600 MB free: an HTTP crawl starts, a browser crawl waits and says why.
    usage = HostUsage(1, 99, memory_available=600 * 10**6)
    assert wait_reason(usage, 90, memory=memory_needed(http)) is None
    assert wait_reason(usage, 90, memory=memory_needed(browser)) == \
        "waiting: 600.0 MB of memory available, 939.5 MB needed"

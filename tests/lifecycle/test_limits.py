"""A crawl's own limits, its org's quotas while it runs, stalls and the pause limit."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.models import Crawl, CrawlFile, CrawlStatus, Intent, Org, OrgUsage, StopReason
from crawls.quotas import OrgUsageNow, stop_message
from tests.lifecycle.claiming import NOW, claim

S = CrawlStatus
NO_USAGE = OrgUsageNow(bytes_stored=0)


def crawl_with(config=None, org=None, **fields) -> Crawl:
    """An unsaved crawl: the rules are pure, they need no database."""
    config = {"seeds": ["https://example.com/"], **(config or {})}
    return Crawl(org=org or Org(slug="news"), config=config, status=S.RUNNING, **fields)


# --- the crawl's own limits ----------------------------------------------------------------


@pytest.mark.parametrize(("elapsed", "expected"), [
    (0, None), (59.9, None), (60, StopReason.TIME_LIMIT), (61, StopReason.TIME_LIMIT),
])
def test_the_time_limit_counts_elapsed_running_seconds(elapsed, expected):
    crawl = crawl_with({"time_limit": 60}, elapsed_seconds=elapsed)
    assert crawl.stop_reason_due(NO_USAGE) == expected


@pytest.mark.parametrize(("size", "expected"), [
    (999, None), (1000, StopReason.SIZE_LIMIT), (1001, StopReason.SIZE_LIMIT),
])
def test_the_size_limit_counts_files_and_bytes_in_progress(size, expected):
    crawl = crawl_with({"size_limit": 1000}, size_bytes=size)
    assert crawl.stop_reason_due(NO_USAGE) == expected


@pytest.mark.parametrize(("done", "expected"), [
    (9, None), (10, StopReason.PAGE_LIMIT), (11, StopReason.PAGE_LIMIT),
])
def test_the_page_limit_counts_pages_done(done, expected):
    crawl = crawl_with({"page_limit": 10}, pages_done=done)
    assert crawl.stop_reason_due(NO_USAGE) == expected


@pytest.mark.parametrize(("own", "org_max", "effective"), [
    (None, None, None), (10, None, 10), (None, 5, 5), (10, 5, 5), (3, 5, 3), (5, 5, 5),
])
def test_the_orgs_max_pages_per_crawl_caps_the_page_limit(own, org_max, effective):
    crawl = crawl_with({"page_limit": own}, org=Org(slug="news", max_pages_per_crawl=org_max))
    assert crawl.effective_page_limit() == effective


def test_a_crawl_without_its_own_page_limit_stops_at_the_orgs_max_pages():
    org = Org(slug="news", max_pages_per_crawl=5)
    assert crawl_with(org=org, pages_done=4).stop_reason_due(NO_USAGE) is None
    assert crawl_with(org=org, pages_done=5).stop_reason_due(NO_USAGE) == StopReason.PAGE_LIMIT


def test_a_crawl_without_limits_never_stops_on_its_own():
    crawl = crawl_with(elapsed_seconds=10**9, size_bytes=10**15, pages_done=10**8)
    assert crawl.stop_reason_due(NO_USAGE) is None


def test_the_first_reason_that_applies_wins():
    org = Org(slug="news", storage_quota_bytes=1)
    crawl = crawl_with({"time_limit": 1, "size_limit": 1, "page_limit": 1}, org=org,
                       elapsed_seconds=5, size_bytes=5, pages_done=5)
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=5)) == StopReason.TIME_LIMIT
    crawl.elapsed_seconds = 0
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=5)) == StopReason.SIZE_LIMIT
    crawl.size_bytes = 0
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=5)) == StopReason.PAGE_LIMIT
    crawl.pages_done = 0
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=5)) == StopReason.STORAGE_QUOTA


# --- the org's quotas while it runs -------------------------------------------------------


@pytest.mark.parametrize(("stored", "in_progress", "expected"), [
    (600, 399, None), (600, 400, StopReason.STORAGE_QUOTA), (1000, 0, StopReason.STORAGE_QUOTA),
    (0, 1001, StopReason.STORAGE_QUOTA),
])
def test_the_storage_quota_counts_kept_bytes_and_bytes_of_active_crawls(stored, in_progress, expected):
    crawl = crawl_with(org=Org(slug="news", storage_quota_bytes=1000))
    usage = OrgUsageNow(bytes_stored=stored, bytes_in_progress=in_progress)
    assert crawl.stop_reason_due(usage) == expected


@pytest.mark.parametrize(("seconds", "expected"), [
    (599.9, None), (600, StopReason.EXEC_QUOTA), (10_000, StopReason.EXEC_QUOTA),
])
def test_the_execution_quota_counts_minutes_of_this_month(seconds, expected):
    crawl = crawl_with(org=Org(slug="news", exec_minutes_quota=10))
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=0, exec_seconds=seconds)) == expected


def test_an_org_without_quotas_never_stops_a_crawl():
    usage = OrgUsageNow(bytes_stored=10**15, bytes_in_progress=10**15, exec_seconds=10**9)
    assert crawl_with().stop_reason_due(usage) is None


def test_a_failed_pages_session_ignores_the_crawls_own_limits_but_not_the_quotas():
    org = Org(slug="news", storage_quota_bytes=1000)
    crawl = crawl_with({"page_limit": 10}, org=org, pages_done=10,
                       config_override={"seeds": ["https://example.com/a"], "page_limit": 1})
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=999)) is None
    assert crawl.stop_reason_due(OrgUsageNow(bytes_stored=1000)) == StopReason.STORAGE_QUOTA


def test_the_usage_of_an_org_is_read_from_its_kept_bytes_active_crawls_and_this_month(make_crawl, org):
    Org.objects.filter(pk=org.pk).update(bytes_stored=5000)
    running = make_crawl(S.RUNNING, size_bytes=700)
    CrawlFile.objects.create(crawl=running, path="a.wacz", size=200, sha256="0" * 64)
    make_crawl(S.COMPLETE, size_bytes=4000)  # finished: its bytes are all in bytes_stored
    OrgUsage.objects.create(org=org, month=dt.date(2026, 3, 1), exec_seconds=90)
    OrgUsage.objects.create(org=org, month=dt.date(2026, 2, 1), exec_seconds=1000)
    usage = OrgUsageNow.read(org, NOW)
    assert usage == OrgUsageNow(bytes_stored=5000, bytes_in_progress=500, exec_seconds=90)


def test_stop_messages_give_the_numbers_a_person_needs():
    org = Org(slug="news", storage_quota_bytes=10**9, exec_minutes_quota=60)
    crawl = crawl_with({"time_limit": 3600, "page_limit": 10}, org=org, elapsed_seconds=3600,
                       pages_done=10)
    usage = OrgUsageNow(bytes_stored=10**9, exec_seconds=3600)
    assert stop_message(crawl, StopReason.STORAGE_QUOTA, usage) == (
        "org 'news' storage quota reached: 1.0 GB of 1.0 GB used")
    assert stop_message(crawl, StopReason.EXEC_QUOTA, usage) == (
        "org 'news' execution quota reached: 1 h of 1 h used this month")
    assert stop_message(crawl, StopReason.TIME_LIMIT, usage) == "time limit reached: ran 1 h of its 1 h limit"
    assert stop_message(crawl, StopReason.PAGE_LIMIT, usage) == "page limit reached: 10 of 10 pages"


@pytest.mark.parametrize(("elapsed", "limit", "sentence"), [
    (20.4, 20, "ran 20 s of its 20 s limit"),
    (90, 90, "ran 1 min 30 s of its 1 min 30 s limit"),
    (600.2, 600, "ran 10 min of its 10 min limit"),
    (5432, 5400, "ran 1 h 31 min of its 1 h 30 min limit"),
])
def test_a_time_limit_stop_says_how_long_in_units_a_person_reads(elapsed, limit, sentence):
    crawl = crawl_with({"time_limit": limit}, elapsed_seconds=elapsed)
    assert stop_message(crawl, StopReason.TIME_LIMIT, OrgUsageNow(bytes_stored=0)) == f"time limit reached: {sentence}"


def test_an_execution_quota_stop_says_how_long_in_units_a_person_reads():
    org = Org(slug="news", exec_minutes_quota=1)
    usage = OrgUsageNow(bytes_stored=0, exec_seconds=61)
    assert stop_message(crawl_with({}, org=org), StopReason.EXEC_QUOTA, usage) == (
        "org 'news' execution quota reached: 1 min 1 s of 1 min used this month")


# --- stalls ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("quiet", "stalled"), [
    (dt.timedelta(minutes=14, seconds=59), False), (dt.timedelta(minutes=15), True),
    (dt.timedelta(hours=2), True),
])
def test_a_running_crawl_stalls_when_no_page_was_done_for_stall_minutes(quiet, stalled):
    crawl = crawl_with(started_at=NOW - dt.timedelta(hours=3), progress_at=NOW - quiet)
    assert crawl.is_stalled(NOW, stall_minutes=15) is stalled


def test_before_its_first_page_a_crawl_stalls_counting_from_its_start():
    assert crawl_with(started_at=NOW - dt.timedelta(minutes=15)).is_stalled(NOW, 15)
    assert not crawl_with(started_at=NOW - dt.timedelta(minutes=14)).is_stalled(NOW, 15)


@pytest.mark.parametrize("status", [S.PAUSED, S.WAITING_CAPACITY, S.GENERATE_WACZ, S.QUEUED])
def test_only_a_running_crawl_can_stall(status):
    crawl = crawl_with(started_at=NOW - dt.timedelta(days=1))
    crawl.status = status
    assert not crawl.is_stalled(NOW, 15)


def test_the_third_stall_exhausts_the_crawl(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW - dt.timedelta(hours=1))
    token = claim(crawl)
    for count in (1, 2, 3):
        assert not crawl.stalls_exhausted
        later = NOW + dt.timedelta(minutes=count)
        assert crawl.record_stall(token, later)
        assert crawl.stalls == count and crawl.progress_at == later
    assert crawl.stalls_exhausted
    crawl.refresh_from_db()
    assert crawl.stalls == 3


def test_a_stall_restarts_the_stall_clock(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW - dt.timedelta(hours=1))
    crawl.record_stall(claim(crawl), NOW)
    assert not crawl.is_stalled(NOW + dt.timedelta(minutes=14), 15)


def test_a_stall_is_not_recorded_without_the_lease_or_twice(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW - dt.timedelta(hours=1))
    token = claim(crawl)
    assert not crawl.record_stall(token + 1, NOW)
    stale = Crawl.objects.get(pk=crawl.pk)
    assert crawl.record_stall(token, NOW)
    assert not stale.record_stall(token, NOW)  # it read stalls=0; the row says 1
    crawl.refresh_from_db()
    assert crawl.stalls == 1


# --- the pause limit --------------------------------------------------------------------------


@pytest.mark.parametrize(("paused_for", "expired"), [(3599, False), (3600, True), (7200, True)])
def test_a_paused_crawl_expires_after_the_pause_limit(paused_for, expired):
    crawl = crawl_with(paused_at=NOW - dt.timedelta(seconds=paused_for))
    crawl.status = S.PAUSED
    assert crawl.pause_expired(NOW, pause_limit=3600) is expired


def test_only_a_paused_crawl_expires():
    crawl = crawl_with(paused_at=NOW - dt.timedelta(days=30))
    assert not crawl.pause_expired(NOW, pause_limit=3600)


def test_pausing_makes_the_crawl_due_exactly_when_its_pause_expires(make_crawl):
    from archiver import conf

    crawl = make_crawl(S.QUEUED)
    crawl.pause(NOW)
    limit = conf.get().pause_limit
    assert crawl.retry_at == NOW + dt.timedelta(seconds=limit)
    assert not crawl.pause_expired(crawl.retry_at - dt.timedelta(seconds=1), limit)
    assert crawl.pause_expired(crawl.retry_at, limit)


# --- graceful stops on a limit ------------------------------------------------------------------


def test_a_limit_stop_is_recorded_as_the_stop_reason_and_a_stop_intent(make_crawl):
    crawl = make_crawl(S.RUNNING)
    token = claim(crawl)
    assert crawl.request_limit_stop(StopReason.SIZE_LIMIT, token, NOW)
    crawl.refresh_from_db()
    assert (crawl.stop_reason, crawl.intent) == (StopReason.SIZE_LIMIT, Intent.STOP)


def test_the_first_limit_stop_reason_stays(make_crawl):
    crawl = make_crawl(S.RUNNING)
    token = claim(crawl)
    crawl.request_limit_stop(StopReason.TIME_LIMIT, token, NOW)
    assert not crawl.request_limit_stop(StopReason.EXEC_QUOTA, token, NOW)
    crawl.refresh_from_db()
    assert crawl.stop_reason == StopReason.TIME_LIMIT


def test_a_limit_stop_does_not_replace_a_requested_cancel(make_crawl):
    crawl = make_crawl(S.RUNNING, intent=Intent.CANCEL)
    assert not crawl.request_limit_stop(StopReason.TIME_LIMIT, claim(crawl), NOW)
    crawl.refresh_from_db()
    assert (crawl.intent, crawl.stop_reason) == (Intent.CANCEL, "")


def test_a_limit_stop_needs_the_lease(make_crawl):
    crawl = make_crawl(S.RUNNING)
    assert not crawl.request_limit_stop(StopReason.TIME_LIMIT, claim(crawl) + 1, NOW)

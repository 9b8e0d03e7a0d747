"""Execution time: counted once per process, split at UTC month boundaries."""

from __future__ import annotations

import datetime as dt

import pytest

from crawls.models import Crawl, CrawlStatus, OrgUsage, Process, ProcessStatus
from crawls.quotas import (
    count_crawl_time,
    count_process_time,
    exec_seconds_to_add,
    month_parts,
    next_month,
)
from tests.lifecycle.claiming import NOW

S = CrawlStatus
MARCH, APRIL = dt.date(2026, 3, 1), dt.date(2026, 4, 1)
MIDNIGHT = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)


def at(**delta) -> dt.datetime:
    return MIDNIGHT + dt.timedelta(**delta)


def test_a_span_within_one_month_is_one_part():
    assert month_parts(at(hours=-2), at(hours=-1)) == [(MARCH, 3600.0)]


def test_a_span_across_a_month_boundary_is_split_at_midnight_utc():
    assert month_parts(at(minutes=-10), at(minutes=5)) == [(MARCH, 600.0), (APRIL, 300.0)]


def test_a_span_ending_exactly_at_midnight_stays_in_its_month():
    assert month_parts(at(minutes=-1), MIDNIGHT) == [(MARCH, 60.0)]


def test_a_span_over_several_months_has_a_part_per_month():
    parts = month_parts(dt.datetime(2026, 1, 31, 23, tzinfo=dt.UTC), dt.datetime(2026, 3, 1, 1, tzinfo=dt.UTC))
    assert parts == [(dt.date(2026, 1, 1), 3600.0), (dt.date(2026, 2, 1), 28 * 86400.0),
                     (MARCH, 3600.0)]


def test_month_boundaries_are_utc_whatever_the_timezone_of_the_times():
    plus_two = dt.timezone(dt.timedelta(hours=2))
    # 01:30 on 1 April at UTC+2 is still 31 March in UTC.
    assert month_parts(at(hours=-1).astimezone(plus_two), at(minutes=-30).astimezone(plus_two)) == [
        (MARCH, 1800.0)]


def test_next_month_rolls_over_the_year():
    assert next_month(dt.datetime(2026, 12, 31, 23, 59, tzinfo=dt.UTC)) == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(("counted_until", "started_at", "ended_at", "running", "expected"), [
    (None, at(minutes=-5), None, True, [(MARCH, 300.0)]),
    (at(minutes=-2), at(minutes=-5), None, True, [(MARCH, 120.0)]),
    (at(minutes=-2), at(minutes=-5), at(minutes=-1), False, [(MARCH, 60.0)]),
    (at(minutes=-1), at(minutes=-5), at(minutes=-1), False, []),
    (None, None, None, True, []),
    (None, at(minutes=-5), None, False, []),  # vanished: no end time, nothing more counted
    (at(minutes=-1), at(minutes=-5), None, True, [(MARCH, 60.0)]),
])
def test_the_seconds_to_add_run_from_counted_until_to_now_or_the_end(
        counted_until, started_at, ended_at, running, expected):
    assert exec_seconds_to_add(counted_until, started_at, ended_at, MIDNIGHT, running) == expected


def test_time_across_midnight_goes_to_both_months(make_crawl, org):
    crawl = make_crawl(S.RUNNING)
    process = make_process(crawl, started_at=at(minutes=-10))
    assert count_process_time(process, at(minutes=5)) == 900.0
    assert usage(org) == {MARCH: 600.0, APRIL: 300.0}
    crawl.refresh_from_db()
    assert crawl.exec_seconds == 900.0


def test_time_is_counted_once(make_crawl, org):
    crawl = make_crawl(S.RUNNING)
    process = make_process(crawl, started_at=at(minutes=-10))
    stale = Process.objects.get(pk=process.pk)
    count_process_time(process, MIDNIGHT)
    assert count_process_time(stale, MIDNIGHT) == 0.0  # it read the old counted_until
    assert count_process_time(process, MIDNIGHT) == 0.0  # nothing new since
    assert usage(org) == {MARCH: 600.0}


def test_successive_counts_add_up(make_crawl, org):
    crawl = make_crawl(S.RUNNING)
    process = make_process(crawl, started_at=at(minutes=-3))
    for minutes in (-2, -1, 0, 1):
        count_process_time(process, at(minutes=minutes))
    assert usage(org) == {MARCH: 180.0, APRIL: 60.0}


def test_an_exited_process_is_counted_up_to_its_exit(make_crawl, org):
    crawl = make_crawl(S.RUNNING)
    process = make_process(crawl, status=ProcessStatus.EXITED, started_at=at(minutes=-10),
                           counted_until=at(minutes=-9), ended_at=at(minutes=-4))
    assert count_process_time(process, MIDNIGHT) == 300.0


def test_a_crawls_elapsed_time_grows_by_its_longest_instance(make_crawl, org):
    crawl = make_crawl(S.RUNNING)
    make_process(crawl, started_at=at(minutes=-10))
    make_process(crawl, instance=1, started_at=at(minutes=-4))
    make_process(crawl, instance=2, status=ProcessStatus.EXITED, started_at=at(minutes=-9),
                 ended_at=at(minutes=-8))
    assert count_crawl_time(crawl, MIDNIGHT) == 600.0
    crawl.refresh_from_db()
    assert (crawl.elapsed_seconds, crawl.exec_seconds) == (600.0, 600.0 + 240.0 + 60.0)
    assert count_crawl_time(crawl, at(minutes=1)) == 60.0
    crawl.refresh_from_db()
    assert crawl.elapsed_seconds == 660.0 and usage(org) == {MARCH: 900.0, APRIL: 120.0}


def test_a_paused_crawl_without_running_instances_adds_no_time(make_crawl, org):
    crawl = make_crawl(S.PAUSED)
    make_process(crawl, status=ProcessStatus.EXITED, started_at=at(minutes=-10),
                 counted_until=at(minutes=-5), ended_at=at(minutes=-5))
    assert count_crawl_time(crawl, MIDNIGHT + dt.timedelta(days=3)) == 0.0
    assert usage(org) == {}


def make_process(crawl: Crawl, instance=0, status=ProcessStatus.RUNNING, **fields) -> Process:
    return Process.objects.create(crawl=crawl, instance=instance, hostname=f"crawl-{crawl.id}-{instance}",
                                  launcher="local", status=status, created_at=NOW, **fields)


def usage(org) -> dict:
    return dict(OrgUsage.objects.filter(org=org).values_list("month", "exec_seconds"))


# --- the running time the views show ---------------------------------------------------------


def running_instance(crawl: Crawl, started: dt.datetime, counted_until: dt.datetime | None = None,
                     instance: int = 0) -> Process:
    return Process.objects.create(crawl=crawl, instance=instance, hostname=f"crawl-{crawl.pk}-{instance}",
                                  launcher="local", status=ProcessStatus.RUNNING, started_at=started,
                                  counted_until=counted_until or started)


def test_a_crawl_running_for_seconds_shows_them_before_they_are_counted(make_crawl):
    crawl = make_crawl(S.RUNNING)
    running_instance(crawl, NOW - dt.timedelta(seconds=7))
    assert crawl.elapsed_seconds == 0 and crawl.elapsed_now(NOW) == 7


def test_the_running_time_adds_the_longest_uncounted_run_to_what_is_counted(make_crawl):
    crawl = make_crawl(S.RUNNING, elapsed_seconds=60)
    running_instance(crawl, NOW - dt.timedelta(minutes=5), counted_until=NOW - dt.timedelta(seconds=4))
    running_instance(crawl, NOW - dt.timedelta(seconds=9), instance=1)
    Process.objects.create(crawl=crawl, instance=2, hostname="x", launcher="local",
                           status=ProcessStatus.EXITED, started_at=NOW - dt.timedelta(hours=1))
    assert crawl.elapsed_now(NOW) == 69


def test_a_final_crawl_shows_only_its_counted_time(make_crawl):
    crawl = make_crawl(S.COMPLETE, elapsed_seconds=42)
    running_instance(crawl, NOW - dt.timedelta(hours=1))  # a row the end did not update
    assert crawl.elapsed_now(NOW) == 42

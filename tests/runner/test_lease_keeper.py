"""Leases are renewed off the tick (runner/lease_keeper.py), in one statement fenced like
the single renewal: a row released, finished or claimed since is left alone; each renewal
says how early it came; a loop stuck in one tick is no longer renewed. Two real daemons
with a slow tick: tests/chaos/test_slow_tick.py."""

from __future__ import annotations

import time

import pytest

from crawls.models import Crawl, RunnerRecord
from runner.lease_keeper import WEDGED_AFTER, LeaseKeeper, renew_held
from runner.state import Held
from runner.tick_stats import TickStats
from tests.runner.step_helpers import T0, later


@pytest.mark.django_db
def test_one_statement_renews_only_the_leases_held_by_their_token(make_runner, fake, make_crawl, settings):
    runner = make_runner(fake)
    ours, released, finished, taken = (make_crawl() for _ in range(4))
    tokens = {}
    for crawl in (ours, released, finished, taken):
        (claim,) = Crawl.objects.filter(pk=crawl.pk).claim(runner.id, T0, settings.lease_seconds)
        tokens[crawl.pk] = claim.token
    Crawl.objects.release(released.pk, tokens[released.pk], later(60))
    Crawl.objects.filter(pk=finished.pk).update(retry_at=None)
    Crawl.objects.filter(pk=taken.pk).update(lease_token=tokens[taken.pk] + 1)

    renewed = Crawl.objects.renew_all(runner.id, tokens, later(4), settings.lease_seconds)

    assert renewed == [ours.pk]
    retry = dict(Crawl.objects.values_list("pk", "retry_at"))
    assert retry[ours.pk] == later(4 + settings.lease_seconds)
    assert retry[released.pk] == later(60) and retry[finished.pk] is None
    assert retry[taken.pk] == later(settings.lease_seconds)


@pytest.mark.django_db
def test_each_renewal_records_how_early_it_came(make_runner, fake, make_crawl, settings):
    runner = make_runner(fake)
    crawl = make_crawl()
    (claim,) = Crawl.objects.filter(pk=crawl.pk).claim(runner.id, T0, settings.lease_seconds)
    runner.held[crawl.pk] = Held(claim.token, renewed_at=T0)
    stats = TickStats()

    assert renew_held(runner.rt, later(1), stats) == 1
    assert stats.renewal_max_late == 1 - settings.lease_seconds  # 4 s before the deadline
    assert runner.held[crawl.pk].renewed_at == later(1)


@pytest.mark.django_db
def test_a_loop_stuck_in_one_tick_is_no_longer_renewed(make_runner, fake, make_crawl, settings):
    runner = make_runner(fake)
    crawl = make_crawl()
    (claim,) = Crawl.objects.filter(pk=crawl.pk).claim(runner.id, T0, settings.lease_seconds)
    runner.held[crawl.pk] = Held(claim.token, renewed_at=T0)
    keeper = LeaseKeeper(runner.rt, TickStats())
    runner.rt.tick_started = time.monotonic() - WEDGED_AFTER - 1

    keeper.pass_once(None)

    assert Crawl.objects.get(pk=crawl.pk).retry_at == later(settings.lease_seconds)


@pytest.mark.django_db
def test_each_heartbeat_carries_the_ticks_histogram_for_metrics(make_runner, fake, settings):
    runner = make_runner(fake)
    settings.run_dir.mkdir(parents=True, exist_ok=True)  # the daemon's start makes it
    stats = TickStats()
    for seconds in (0.004, 0.2, 0.2):
        stats.tick(seconds)
    keeper = LeaseKeeper(runner.rt, stats)

    keeper.pass_once(None)

    row = RunnerRecord.objects.get(pk=runner.id)
    assert row.heartbeat_at == T0 and row.tick_stats["count"] == 3
    counts = dict(zip(row.tick_stats["bounds"], row.tick_stats["counts"], strict=True))
    assert (counts[0.005], counts[0.1], counts[0.25], counts[300]) == (1, 1, 3, 3)
    assert row.tick_stats["sum"] == pytest.approx(0.404)

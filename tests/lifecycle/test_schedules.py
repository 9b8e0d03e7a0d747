"""Schedules: a crawl per cron slot, never two at once, one run after downtime."""

from __future__ import annotations

import datetime as dt
import json
import logging
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from crawls import schedules
from crawls.config import CrawlConfig
from crawls.models import Crawl, CrawlStatus, Schedule
from crawls.schedules import check_cron, create_schedule, fire_due_schedules, next_slot

S = CrawlStatus
T0 = dt.datetime(2026, 3, 15, 2, 30, tzinfo=dt.UTC)
SLOT = dt.datetime(2026, 3, 15, 3, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
CONFIG = CrawlConfig(seeds=["https://example.com/"], depth=2, page_limit=50)


@pytest.fixture
def nightly(org) -> Schedule:
    return create_schedule(org, "0 3 * * *", CONFIG, tags=["nightly"], now=T0)


def crawls_of(schedule: Schedule) -> list[Crawl]:
    return list(Crawl.objects.filter(schedule=schedule).order_by("created_at"))


# --- cron -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cron", ["0 3 * * *", "*/15 * * * 1-5", "@daily", "  0  3 * * *  "])
def test_valid_cron_expressions_are_accepted(cron):
    assert check_cron(cron) == " ".join(cron.split())


@pytest.mark.parametrize(("cron", "says"), [
    ("61 * * * *", "not a valid cron expression"),
    ("* * *", "not a valid cron expression"),
    ("*/5 * * * * *", "not a valid cron expression"),  # seconds: not five fields
    ("daily", "not a valid cron expression"),
    ("0 0 31 2 *", "never happens"),
])
def test_invalid_cron_expressions_are_refused_clearly(cron, says):
    with pytest.raises(ValueError, match=says):
        check_cron(cron)


def test_the_next_slot_is_strictly_after_the_given_time():
    assert next_slot("0 3 * * *", T0) == SLOT
    assert next_slot("0 3 * * *", SLOT) == SLOT + DAY


def test_a_new_schedule_is_due_at_its_first_slot_after_creation(nightly):
    assert nightly.retry_at == SLOT and nightly.enabled


# --- fire_due_schedules ---------------------------------------------------------------------------


def test_nothing_fires_before_the_slot(nightly):
    assert not fire_due_schedules("runner-a", SLOT - dt.timedelta(seconds=1))
    assert crawls_of(nightly) == []


def test_a_due_schedule_queues_one_crawl_of_its_configuration(nightly):
    assert fire_due_schedules("runner-a", SLOT)
    (crawl,) = crawls_of(nightly)
    assert crawl.status == S.QUEUED and crawl.created_at == SLOT
    # Its browser mode is decided as the slot's crawl is added (no Chromium for the tests: HTTP).
    assert crawl.crawl_config.browser is False
    assert crawl.crawl_config.model_copy(update={"browser": None}) == CONFIG
    assert crawl.tags == ["nightly"] and crawl.org == nightly.org
    nightly.refresh_from_db()
    assert nightly.last_crawl == crawl
    assert (nightly.retry_at, nightly.lease_owner) == (SLOT + DAY, "")


def test_a_schedule_fires_once_per_slot(nightly):
    fire_due_schedules("runner-a", SLOT)
    assert not fire_due_schedules("runner-b", SLOT)
    assert not fire_due_schedules("runner-a", SLOT + dt.timedelta(hours=23))
    assert len(crawls_of(nightly)) == 1


def test_a_schedule_never_queues_a_crawl_while_its_last_one_is_active(nightly):
    fire_due_schedules("runner-a", SLOT)
    Crawl.objects.filter(schedule=nightly).update(status=S.PAUSED)
    assert fire_due_schedules("runner-a", SLOT + DAY)
    assert len(crawls_of(nightly)) == 1
    nightly.refresh_from_db()
    assert nightly.retry_at == SLOT + 2 * DAY  # the slot is skipped, not retried


def test_the_next_slot_after_a_finished_crawl_queues_a_new_one(nightly):
    fire_due_schedules("runner-a", SLOT)
    Crawl.objects.filter(schedule=nightly).update(status=S.COMPLETE, retry_at=None)
    fire_due_schedules("runner-a", SLOT + DAY)
    assert len(crawls_of(nightly)) == 2


def test_a_run_missed_during_downtime_runs_once(nightly):
    back = SLOT + 5 * DAY + dt.timedelta(hours=2)  # five slots were missed
    assert fire_due_schedules("runner-a", back)
    assert not fire_due_schedules("runner-a", back)
    assert len(crawls_of(nightly)) == 1
    nightly.refresh_from_db()
    assert nightly.retry_at == SLOT + 6 * DAY


def test_a_disabled_schedule_does_not_fire_and_resumes_from_its_next_slot(nightly):
    schedules.disable(nightly)
    assert not fire_due_schedules("runner-a", SLOT + 3 * DAY)
    schedules.enable(nightly, SLOT + 3 * DAY + dt.timedelta(hours=1))
    assert nightly.retry_at == SLOT + 4 * DAY
    assert not fire_due_schedules("runner-a", SLOT + 3 * DAY + dt.timedelta(hours=1))
    assert fire_due_schedules("runner-a", SLOT + 4 * DAY)
    assert len(crawls_of(nightly)) == 1


def test_a_schedule_whose_lease_was_lost_queues_nothing(nightly):
    (claim,) = Schedule.objects.claim("runner-a", SLOT, lease_seconds=1)
    later = SLOT + dt.timedelta(seconds=2)
    Schedule.objects.claim("runner-b", later, lease_seconds=60)  # a's lease expired
    assert schedules.fire(claim, SLOT) is None
    assert crawls_of(nightly) == []


def test_a_schedule_with_a_broken_configuration_skips_the_slot_and_logs(nightly, caplog):
    Schedule.objects.filter(pk=nightly.pk).update(config={"seeds": ["ftp://nope"]})
    with caplog.at_level(logging.ERROR, logger="crawls.schedules"):
        assert fire_due_schedules("runner-a", SLOT)
    assert crawls_of(nightly) == [] and "invalid crawl configuration" in caplog.text
    nightly.refresh_from_db()
    assert nightly.retry_at == SLOT + DAY


def test_many_due_schedules_fire_in_one_pass(org):
    made = [create_schedule(org, "*/5 * * * *", CONFIG, now=T0) for _ in range(3)]
    assert fire_due_schedules("runner-a", T0 + dt.timedelta(minutes=5))
    assert all(len(crawls_of(schedule)) == 1 for schedule in made)


# --- the schedule command -------------------------------------------------------------------------


def run(*args) -> str:
    out = StringIO()
    call_command("schedule", *args, stdout=out)
    return out.getvalue()


def test_schedule_add_stores_the_crawl_options(org):
    out = run("add", "0 3 * * *", "https://example.com/", "https://example.org/", "--depth", "1",
              "--limit", "10", "--size-limit", "1GB", "--time-limit", "2h", "--scope", "host",
              "--exclude", "logout", "--workers", "2", "--scale", "3", "--org", "news", "--tag", "x")
    schedule = Schedule.objects.get()
    assert out.startswith(f"schedule {schedule.pk}: next run ")
    assert schedule.org == org and schedule.tags == ["x"] and schedule.cron == "0 3 * * *"
    config = CrawlConfig(**schedule.config)
    assert (config.seeds, config.depth, config.page_limit, config.size_limit, config.time_limit) == (
        ["https://example.com/", "https://example.org/"], 1, 10, 10**9, 7200)
    assert (config.scope_type, config.exclude, config.workers, config.scale) == ("host", ["logout"], 2, 3)


@pytest.mark.parametrize(("args", "says"), [
    (["61 * * * *", "https://example.com/"], "not a valid cron expression"),
    (["0 3 * * *", "ftp://example.com/"], "only http:// and https://"),
    (["0 3 * * *", "https://example.com/", "--exclude", "("], "--exclude"),
    (["0 3 * * *", "https://example.com/", "--org", "nobody"], "no org 'nobody'"),
    (["0 3 * * *", "https://example.com/", "--scale", "9"], "--scale"),
])
def test_schedule_add_refuses_bad_input_and_writes_nothing(org, args, says):
    with pytest.raises(CommandError, match=says):
        run("add", *args)
    assert not Schedule.objects.exists()


def test_schedule_list_shows_the_next_run_and_the_last_crawl(nightly):
    fire_due_schedules("runner-a", SLOT)
    listed = json.loads(run("list", "--json"))
    assert listed == [{
        "id": nightly.pk, "cron": "0 3 * * *", "org": "news", "enabled": True,
        "seeds": ["https://example.com/"], "config": CONFIG.model_dump(mode="json"), "tags": ["nightly"], "watch": None,
        "next_run": "2026-03-16T03:00:00Z",
        "last_crawl": {"id": crawls_of(nightly)[0].id, "status": "queued"},
    }]
    table = run("list")
    assert "0 3 * * *" in table and "2026-03-16 03:00" in table and "queued" in table


def test_schedule_disable_and_enable_by_id(nightly):
    assert run("disable", str(nightly.pk)) == f"disabled schedule {nightly.pk}\n"
    nightly.refresh_from_db()
    assert not nightly.enabled and nightly.retry_at is None
    assert "disabled" in run("list")
    assert run("enable", str(nightly.pk)).startswith(f"enabled schedule {nightly.pk}: next run ")
    nightly.refresh_from_db()
    assert nightly.enabled and nightly.retry_at is not None


@pytest.mark.parametrize(("pk", "says"), [("abc", "not a schedule id"), ("999", "no schedule 999")])
def test_schedule_disable_of_an_unknown_id_is_refused(pk, says, db):
    with pytest.raises(CommandError, match=says):
        run("disable", pk)


def test_a_schedule_with_an_unreadable_cron_is_looked_at_again_in_an_hour(nightly, caplog):
    Schedule.objects.filter(pk=nightly.pk).update(cron="0 0 31 2 *")  # e.g. edited in the admin
    with caplog.at_level(logging.ERROR, logger="crawls.schedules"):
        assert fire_due_schedules("runner-a", SLOT)
    nightly.refresh_from_db()
    assert crawls_of(nightly) == [] and nightly.retry_at == SLOT + schedules.BROKEN_RETRY
    assert "cannot be read" in caplog.text

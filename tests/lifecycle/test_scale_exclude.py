"""Scale and live exclusions: recorded intent the runner carries out."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from archiver.errors import NotAllowed
from crawls.models import Crawl, CrawlMessage, CrawlStatus
from crawls.models.statuses import said
from tests.lifecycle.claiming import NOW

S = CrawlStatus


def run(name: str, *args) -> str:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


# --- scale ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", S.ACTIVE)
def test_an_active_crawl_can_be_scaled(make_crawl, status):
    crawl = make_crawl(status)
    assert run("scale", crawl.short_id, "4") == f"crawl {crawl.short_id}: scale 1 → 4\n"
    crawl.refresh_from_db()
    assert crawl.scale == 4


@pytest.mark.parametrize("scale", ["1", "8"])
def test_scale_accepts_one_to_eight(make_crawl, scale):
    crawl = make_crawl(S.RUNNING)
    run("scale", crawl.id, scale)
    crawl.refresh_from_db()
    assert crawl.scale == int(scale)


@pytest.mark.parametrize(("scale", "says"), [
    ("0", "scale must be from 1 to 8, not 0"), ("9", "scale must be from 1 to 8, not 9"),
    ("-1", "scale must be from 1 to 8"), ("two", "is not a whole number"),
])
def test_scale_refuses_numbers_out_of_range(make_crawl, scale, says):
    crawl = make_crawl(S.RUNNING)
    with pytest.raises(CommandError, match=says):
        run("scale", crawl.id, scale)
    crawl.refresh_from_db()
    assert crawl.scale == 1


@pytest.mark.parametrize("status", S.FINAL)
def test_a_finished_crawl_cannot_be_scaled(make_crawl, status):
    crawl = make_crawl(status)
    with pytest.raises(CommandError, match=f"cannot scale crawl {crawl.short_id}: {re.escape(said(status))}"):
        run("scale", crawl.id, "2")


def test_scale_of_an_unknown_crawl_is_refused(db):
    with pytest.raises(CommandError, match="no crawl with id 'abc'"):
        run("scale", "abc", "2")


# --- exclude ----------------------------------------------------------------------------------


def test_an_exclusion_is_kept_in_the_config_and_sent_to_running_instances(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    out = run("exclude", crawl.short_id, r"/calendar/\d+")
    assert out == f"crawl {crawl.short_id} excludes '/calendar/\\\\d+' (sent to its running instances)\n"
    crawl.refresh_from_db()
    assert crawl.config["exclude"] == [r"/calendar/\d+"]
    assert crawl.crawl_config.exclude == [r"/calendar/\d+"]  # relaunches keep it
    (message,) = crawl.unsent_messages()
    assert message.payload == {"type": "addExclusion", "regex": r"/calendar/\d+"}


def test_removing_an_exclusion_queues_a_remove_message(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW, config={"exclude": ["a", "b"]})
    run("exclude", crawl.id, "a", "--remove")
    crawl.refresh_from_db()
    assert crawl.config["exclude"] == ["b"]
    assert [m.payload for m in crawl.unsent_messages()] == [{"type": "removeExclusion", "regex": "a"}]


def test_a_crawl_that_never_ran_only_changes_its_config(make_crawl):
    crawl = make_crawl(S.QUEUED)
    assert "(sent" not in run("exclude", crawl.id, "logout")
    crawl.refresh_from_db()
    assert crawl.config["exclude"] == ["logout"] and not CrawlMessage.objects.exists()


def test_a_paused_crawl_gets_the_message_for_when_it_runs_again(make_crawl):
    crawl = make_crawl(S.PAUSED, started_at=NOW)
    run("exclude", crawl.id, "logout")
    assert crawl.unsent_messages().count() == 1


@pytest.mark.parametrize(("args", "says"), [
    (["("], "is not a valid regular expression"),
    (["already"], "already excludes 'already'"),
    (["absent", "--remove"], "has no exclusion 'absent'"),
])
def test_exclude_refuses_bad_input_and_writes_nothing(make_crawl, args, says):
    crawl = make_crawl(S.RUNNING, started_at=NOW, config={"exclude": ["already"]})
    with pytest.raises(CommandError, match=says):
        run("exclude", crawl.id, *args)
    crawl.refresh_from_db()
    assert crawl.config["exclude"] == ["already"] and not CrawlMessage.objects.exists()


def test_a_finished_crawl_takes_no_exclusions(make_crawl):
    crawl = make_crawl(S.COMPLETE, started_at=NOW)
    with pytest.raises(CommandError, match="cannot change the exclusions of crawl"):
        run("exclude", crawl.id, "logout")


def test_a_message_is_marked_sent_once(make_crawl):
    crawl = make_crawl(S.RUNNING, started_at=NOW)
    crawl.change_exclusion("x", NOW)
    message = crawl.unsent_messages().get()
    stale = CrawlMessage.objects.get(pk=message.pk)
    assert message.mark_sent(NOW)
    assert not stale.mark_sent(NOW)
    assert not crawl.unsent_messages().exists()


def test_change_exclusion_keeps_the_other_config_fields(make_crawl):
    crawl = make_crawl(S.RUNNING, config={"depth": 3, "page_limit": 9})
    crawl.change_exclusion("x", NOW)
    fresh = Crawl.objects.get(pk=crawl.pk).crawl_config
    assert (fresh.depth, fresh.page_limit, fresh.exclude) == (3, 9, ["x"])


def test_set_scale_refuses_out_of_range_in_the_model_too(make_crawl):
    with pytest.raises(NotAllowed):
        make_crawl(S.RUNNING).set_scale(9, NOW)

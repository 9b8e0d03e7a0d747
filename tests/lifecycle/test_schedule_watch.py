"""`archiver schedule watch` and `schedule add --watch-*`: what change alerts watch."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from crawls.models import Schedule

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = StringIO()
    call_command("schedule", *args, stdout=out)
    return out.getvalue()


def test_a_schedule_watches_what_it_is_told_and_shows_it(org):
    run("add", "0 3 * * *", "https://example.com/", "--org", org.slug, "--watch-pages")
    schedule = Schedule.objects.get()
    assert schedule.watch == {"pages": True} and schedule.watch_since is not None
    assert "css main .price" in run("watch", str(schedule.pk), "--watch-selector", "main .price")
    (listed,) = json.loads(run("list", "--json"))
    assert listed["watch"] == {"selector": "main .price"}
    run("watch", str(schedule.pk), "--none")
    schedule.refresh_from_db()
    assert schedule.watch is None and schedule.watch_since is None


@pytest.mark.parametrize(("args", "says"), [
    (["--watch-selector", "main > p"], "not supported"),
    (["--watch-url", "ftp://x/"], "not an http"),
    (["--watch-pages", "--watch-url", "https://example.com/"], "one of them"),
    ([], "say what to watch"),
    (["--none", "--watch-pages"], "say what to watch"),
])
def test_a_bad_watch_is_refused_and_nothing_changes(org, args, says):
    run("add", "0 3 * * *", "https://example.com/", "--org", org.slug)
    schedule = Schedule.objects.get()
    with pytest.raises(CommandError, match=says):
        run("watch", str(schedule.pk), *args)
    schedule.refresh_from_db()
    assert schedule.watch is None

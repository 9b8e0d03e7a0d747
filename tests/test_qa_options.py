"""`--qa` on `archiver add` and `schedule add`, and the admin's forms: stored in the crawl
config as `qa`, absent when not asked for."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from crawls.admin.forms import CrawlConfigForm
from crawls.models import Crawl, Schedule

pytestmark = pytest.mark.django_db


def test_add_and_schedule_add_carry_qa():
    out = io.StringIO()
    call_command("add", "https://example.com/", "--qa", "--no-browser", stdout=out)
    assert Crawl.objects.get(pk=out.getvalue().strip()).config["qa"] is True
    out = io.StringIO()
    call_command("add", "https://example.org/", "--no-browser", stdout=out)
    assert "qa" not in Crawl.objects.get(pk=out.getvalue().strip()).config
    call_command("schedule", "add", "0 3 * * *", "https://example.com/", "--qa", "--no-browser",
                 stdout=io.StringIO())
    assert Schedule.objects.get().config["qa"] is True


def test_the_admin_form_offers_quality_review():
    form = CrawlConfigForm()
    assert "qa" in form.fields and form.fields["qa"].label == "Quality review"
